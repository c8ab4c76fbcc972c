"""Private fine-tuning: a config and a loaded model in, a trained model, its ledger and results out.

* :mod:`~raptor.training.config`: the typed, frozen configs (``TrainConfig`` and its parts);
* :mod:`~raptor.training.methods`: the method table (trainable set, grouping, streams);
* :mod:`~raptor.training.run`: the run, from records to results (``fine_tune``, the one assembly);
* :mod:`~raptor.training.setup`: the model set up for a method from public inputs (trainable set,
  LoRA, head, the public stage);
* :mod:`~raptor.training.step`: one update and its release (the Trainer, the step plan, noise);
* :mod:`~raptor.training.saving`: checkpoints, fingerprints, the final model, strict JSON;
* :mod:`~raptor.training.evaluator` and :mod:`~raptor.training.generate`: scoring a classifier,
  and the generative (answer-only) objective;
* :mod:`~raptor.training.names`: the choice lists the CLI offers, importable without torch.
"""
