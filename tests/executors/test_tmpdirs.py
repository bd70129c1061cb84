"""Where a trial's compile caches go: into its own folder, unless the user placed them on purpose."""

from __future__ import annotations

from pathlib import Path

from autotune.executors.tmpdirs import tmp_env


def test_torchs_own_default_written_into_the_environment_is_not_taken_for_the_users_choice(tmp_path):
    # The first compile in a process writes <tmp>/torchinductor_<user> into os.environ; a Ray node's
    # workers and our fork server inherit it from a process that compiled before.
    inherited = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root"}
    env = tmp_env(tmp_path, inherited)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton") and env["TMPDIR"] == str(tmp_path)


def test_a_cache_the_user_placed_stays_theirs(tmp_path):
    env = tmp_env(tmp_path, {"TORCHINDUCTOR_CACHE_DIR": "/data/compile-cache", "TRITON_CACHE_DIR": "/data/triton"})
    assert "TORCHINDUCTOR_CACHE_DIR" not in env and "TRITON_CACHE_DIR" not in env
    assert Path(env["TMPDIR"]) == tmp_path


def test_an_empty_setting_is_no_placement(tmp_path):
    assert tmp_env(tmp_path, {"TORCHINDUCTOR_CACHE_DIR": ""})["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
