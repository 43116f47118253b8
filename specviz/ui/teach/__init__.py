"""What the page's teaching tools compute, with no gradio: one verify pass as beats
(:mod:`.beats`), the playground's what-if maths (:mod:`.playground`), the first-token experiment
behind "Is it lossless?" (:mod:`.lossless`), the classroom links' queries
(:mod:`.link_query`) and what each lesson says about the visitor's run (:mod:`.lesson_runs`). Only the page uses them; the library (``specviz/``) never imports them.
"""
