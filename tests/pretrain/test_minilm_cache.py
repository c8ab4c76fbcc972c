"""Where ``raptor.pretrain.minilm.ensure_built`` builds and finds ``minilm-moe``: an explicit
``cache_dir``, else ``$RAPTOR_CACHE``, else ``~/.cache/raptor`` (the build itself is stubbed: this is
about the directory, not the upcycling)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor.errors import ConfigError
from raptor.pretrain import minilm


@pytest.fixture
def builds(monkeypatch) -> list[Path]:
    made: list[Path] = []

    def fake_build(name: str, target: Path) -> Path:
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        made.append(target)
        return target

    monkeypatch.setattr(minilm, "build", fake_build)
    return made


def test_an_explicit_cache_dir_is_used_over_the_environment(tmp_path, monkeypatch, builds):
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "env"))
    out = minilm.ensure_built("minilm-moe", cache_dir=tmp_path / "mine")
    assert out == tmp_path / "mine" / f"minilm-moe-v{minilm.BUILD_VERSION}"
    assert (out / "config.json").is_file() and not (tmp_path / "env").exists()
    assert len(builds) == 1
    assert minilm.ensure_built("minilm-moe", cache_dir=str(tmp_path / "mine")) == out  # cached: no second build
    assert len(builds) == 1


def test_the_default_is_raptor_cache_then_the_home_cache(tmp_path, monkeypatch, builds):
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "env"))
    assert minilm.ensure_built("minilm-moe") == tmp_path / "env" / f"minilm-moe-v{minilm.BUILD_VERSION}"
    monkeypatch.delenv("RAPTOR_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert minilm.cache_root() == tmp_path / "home" / ".cache" / "raptor"
    assert minilm.cache_root(tmp_path / "x") == tmp_path / "x"


def test_an_unknown_name_is_refused(tmp_path, builds):
    with pytest.raises(ConfigError, match="unknown built model"):
        minilm.ensure_built("nope", cache_dir=tmp_path)
    assert not builds
