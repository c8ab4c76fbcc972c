"""The public-API example in raptor.per_sample's docstring runs and its assertions hold."""

from __future__ import annotations

import raptor.per_sample as per_sample


def test_docstring_example_runs():
    text = per_sample.__doc__.split("Example (compare with your own one-record loop)::")[1].split("(``raptor")[0]
    code = "\n".join(line[4:] for line in text.splitlines())
    assert "engine.compute" in code
    exec(compile(code, "per_sample_example", "exec"), {})
