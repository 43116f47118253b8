"""Training a draft: an EAGLE-style head on the target's own features (:mod:`specviz.train.train_draft`),
and the checks that keep its training files from being useless or hostile (:mod:`specviz.train.train_files`).
"""
