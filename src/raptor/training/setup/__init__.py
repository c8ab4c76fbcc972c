"""The model set up for a method before training, from public inputs only: the trainable set and
LoRA (:mod:`~raptor.training.setup.trainable`), the head's initialisation
(:mod:`~raptor.training.setup.head_init`), the public stage (routing, layer choice, denominators,
clip norms: :mod:`~raptor.training.setup.public_stage`) and ``raptor inspect``'s layer report.
"""
