"""What a run writes: checkpoints (:mod:`~raptor.training.saving.checkpoint`), the fingerprint that
ties a checkpoint to its run (:mod:`~raptor.training.saving.fingerprint`), the final model
(:mod:`~raptor.training.saving.final_model`) and strict JSON (:mod:`~raptor.training.saving.json_io`).
"""
