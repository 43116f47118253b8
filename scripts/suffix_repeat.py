"""The suffix drafter on a repeated prompt: tokens per pass when the same prompt is run again in
one process, so the drafter's history holds its own earlier outputs (labelled as such: this is the
effect the bench removes by clearing the history before every call).

    python -m scripts.suffix_repeat

SmolLM2-135M-Instruct float32, greedy, the bench's fix-typos prompt, 64 tokens, K = 8, B = 1 and 4.
Deterministic counts, not timings.
"""

from specviz.models import loading as models
from specviz.drafters.registry import build_drafter
from specviz.run.bench import load_prompts
from specviz.drafters import clear_suffix_history
from specviz.run.runner import make_generation
from specviz.core.sampling import SamplingConfig
from specviz.figures.analysis import analyse_generation


def main() -> None:
    target = models.load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    prompt = [p for p in load_prompts(None) if p.name == "fix-typos"][0]
    ids = target.encode(prompt.prompt, prompt.chat)
    greedy = SamplingConfig(0.0)
    for b in (1, 4):
        clear_suffix_history()
        for attempt in (1, 2, 3):
            drafter = build_drafter("suffix", target)
            g = make_generation(target, drafter, ids, 8, greedy, 64, 0, eos=False, branches=b).run()
            a = analyse_generation(g)
            history = "empty" if attempt == 1 else f"{attempt - 1} earlier output(s) of this prompt"
            print(f"B={b} run {attempt} (history: {history}): tokens/pass {a.tokens_per_pass:.2f}, "
                  f"passes {a.target_passes}, nodes/pass {a.proposed_per_pass:.2f}")
        lookup = analyse_generation(make_generation(target, build_drafter("ngram", target), ids, 8, greedy, 64, 0, eos=False,
                                 branches=b).run())
        print(f"B={b} prompt lookup for comparison: tokens/pass {lookup.tokens_per_pass:.2f}")


if __name__ == "__main__":
    main()
