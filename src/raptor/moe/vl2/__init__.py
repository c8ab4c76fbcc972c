"""DeepSeek-VL2 (vision-language MoE) without the release's remote code.

- :mod:`raptor.moe.vl2.config`: the release's ``config.json`` schema;
- :mod:`raptor.moe.vl2.model`: SigLIP tower + projector + 2-D tile tags + DeepSeekMoE decoder;
- :mod:`raptor.moe.vl2.release_files`: release safetensors keys <-> raptor names, :func:`load_vl2`;
- prompts and records: :mod:`raptor.data.vl2_processor`; a tiny release-layout checkpoint:
  :mod:`raptor.data.vl2_tiny` (they use raptor.data, so they live in training).
"""

from raptor.moe.vl2.config import MODEL_TYPE, Vl2Config
from raptor.moe.vl2.model import DeepseekVL2ForCausalLM
from raptor.moe.vl2.release_files import load_vl2, read_config, save_release_checkpoint

__all__ = ["MODEL_TYPE", "DeepseekVL2ForCausalLM", "Vl2Config", "load_vl2", "read_config",
           "save_release_checkpoint"]
