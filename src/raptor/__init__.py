"""raptor: role-aware differentially private fine-tuning of Mixture-of-Experts transformers.

Importing this package has no side effects: it loads no model, touches no RNG and reads no
environment variable. Sub-packages are imported on demand.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
