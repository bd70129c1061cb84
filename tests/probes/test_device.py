"""Which kernel packages a frame reports: found on disk, never imported (a broken install must not crash it)."""

from __future__ import annotations

import sys

from autotune.probes.device import installed_kernels


def _package(root, name: str, parts: tuple[str, ...]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    # A package that fails to import with something other than ImportError, as a torchao built for another torch.
    (folder / "__init__.py").write_text("raise RuntimeError('built for another torch')\n")
    for part in parts:
        (folder / part).mkdir()
        (folder / part / "__init__.py").write_text("")


def test_a_torchao_that_cannot_import_is_reported_by_its_float8_folder_without_importing_it(tmp_path, monkeypatch):
    _package(tmp_path / "with", "torchao", ("float8",))
    monkeypatch.syspath_prepend(str(tmp_path / "with"))
    monkeypatch.delitem(sys.modules, "torchao", raising=False)
    assert installed_kernels()["torchao"] is True
    assert "torchao" not in sys.modules


def test_a_torchao_without_float8_is_not_reported(tmp_path, monkeypatch):
    _package(tmp_path / "without", "torchao", ())
    monkeypatch.syspath_prepend(str(tmp_path / "without"))
    monkeypatch.delitem(sys.modules, "torchao", raising=False)
    assert installed_kernels()["torchao"] is False
