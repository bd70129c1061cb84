"""host= resolved through an SSH config as ssh resolves it, without a server: aliases, what the words of
host= override, ProxyJump chains, and the one-line refusals."""

from __future__ import annotations

import getpass
import os

import pytest

from autotune.util.errors import JobError
from autotune.executors.ssh_route import Hop, route


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    for name in ("gpu_key", "jump_key", "other_key"):
        (tmp_path / ".ssh" / name).write_text("a key file\n")
    return tmp_path


def write(home, text: str):
    path = home / ".ssh" / "config"
    path.write_text(text)
    return path


def addresses(hops: tuple[Hop, ...]) -> list[str]:
    return [hop.address for hop in hops]


def test_an_alias_takes_hostname_user_port_and_keys_from_its_entry(home):
    config = write(home, "Host gpu-box\n  HostName 10.0.0.7\n  User me\n  Port 2222\n"
                         "  IdentityFile ~/.ssh/gpu_key\n  IdentityFile ~/.ssh/other_key\n")
    (hop,) = route("gpu-box", str(config))
    assert hop.address == "me@10.0.0.7:2222" and hop.name == "gpu-box"
    assert hop.keys == (str(home / ".ssh" / "gpu_key"), str(home / ".ssh" / "other_key"))  # ~ expanded, in order
    assert hop.known_hosts == (str(home / ".ssh" / "known_hosts"),)


def test_the_default_config_is_read_from_the_home_and_a_missing_one_is_no_config(home):
    assert addresses(route("gpu-box")) == [f"{getpass.getuser()}@gpu-box:22"]   # as ssh: the name, port 22
    write(home, "Host gpu-box\n  HostName 10.0.0.7\n")
    assert addresses(route("gpu-box")) == [f"{getpass.getuser()}@10.0.0.7:22"]


def test_the_words_of_host_and_ssh_key_win_over_the_config(home):
    config = write(home, "Host gpu-box\n  HostName 10.0.0.7\n  User me\n  Port 2222\n  IdentityFile ~/.ssh/gpu_key\n")
    (hop,) = route("root@gpu-box:22", str(config), key=str(home / ".ssh" / "other_key"))
    assert hop.address == "root@10.0.0.7:22" and hop.keys == (str(home / ".ssh" / "other_key"),)


def test_patterns_tokens_and_the_first_value_apply_as_in_ssh(home):
    config = write(home, "Host *.lab\n  HostName %h.example.org\n  User lab\n"
                         "Host *\n  User everyone\n  Port 2200\n")
    assert addresses(route("gpu1.lab", str(config))) == ["lab@gpu1.lab.example.org:2200"]
    assert addresses(route("elsewhere", str(config))) == ["everyone@elsewhere:2200"]
    config = write(home, "Match host gpu-box\n  User matched\n  Port 2201\n")
    assert addresses(route("gpu-box", str(config))) == ["matched@gpu-box:2201"]


def test_a_proxyjump_goes_through_the_jump_host_resolved_through_the_config_itself(home):
    config = write(home, "Host gpu-box\n  HostName 10.0.0.7\n  ProxyJump bastion\n"
                         "Host bastion\n  HostName bastion.example.org\n  User jumper\n  Port 2022\n"
                         "  IdentityFile ~/.ssh/jump_key\n")
    jump, target = route("me@gpu-box", str(config), key=str(home / ".ssh" / "gpu_key"))
    assert jump.address == "jumper@bastion.example.org:2022" and jump.keys == (str(home / ".ssh" / "jump_key"),)
    assert target.address == "me@10.0.0.7:22" and target.keys == (str(home / ".ssh" / "gpu_key"),)  # ssh_key: target only


def test_several_jumps_go_in_order_each_hop_resolved_and_the_last_reached_through_the_others(home):
    # ProxyJump a,b: b through a (b's own ProxyJump overridden), a by its own entry (its ProxyJump followed).
    config = write(home, "Host gpu-box\n  HostName 10.0.0.7\n  ProxyJump a,ops@b:2022\n"
                         "Host a\n  HostName a.example.org\n  ProxyJump outer\n"
                         "Host b\n  HostName b.internal\n  ProxyJump never\n"
                         "Host outer\n  HostName outer.example.org\n  User out\n")
    user = getpass.getuser()
    assert addresses(route("gpu-box", str(config))) == [
        "out@outer.example.org:22", f"{user}@a.example.org:22", "ops@b.internal:2022", f"{user}@10.0.0.7:22"]


def test_proxyjump_none_and_a_jump_written_as_an_ssh_uri(home):
    # As in ssh, the bastion needs its own `ProxyJump none` ahead of `Host *`, or it would jump through itself.
    config = write(home, "Host direct bastion\n  ProxyJump none\nHost *\n  ProxyJump ssh://ops@bastion:2022\n")
    assert addresses(route("direct", str(config))) == [f"{getpass.getuser()}@direct:22"]
    assert addresses(route("other", str(config))) == ["ops@bastion:2022", f"{getpass.getuser()}@other:22"]


def test_include_is_read_in_place_relative_to_the_ssh_folder(home):
    (home / ".ssh" / "conf.d").mkdir()
    (home / ".ssh" / "conf.d" / "lab.conf").write_text("Host gpu-box\n  HostName 10.0.0.7\n")
    config = write(home, "Include conf.d/*.conf\nHost *\n  User me\n")
    assert addresses(route("gpu-box", str(config))) == ["me@10.0.0.7:22"]


def test_user_known_hosts_file_of_the_entry_is_where_keys_are_checked(home):
    config = write(home, "Host gpu-box\n  UserKnownHostsFile ~/lab_hosts ~/.ssh/known_hosts\n")
    (hop,) = route("gpu-box", str(config))
    assert hop.known_hosts == (str(home / "lab_hosts"), str(home / ".ssh" / "known_hosts"))


@pytest.mark.parametrize("text, host, words", [
    ("Host gpu-box\n  IdentityFile ~/.ssh/missing_key\n", "gpu-box", ["host gpu-box:", "missing_key", "does not exist"]),
    ("Host gpu-box\n  ProxyJump bastion\nHost bastion\n  IdentityFile ~/.ssh/gone\n", "gpu-box",
     ["host gpu-box, jump host bastion:", "gone", "does not exist"]),
    ("Host gpu-box\n  ProxyCommand nc %h %p\n", "gpu-box", ["host gpu-box:", "ProxyCommand", "ProxyJump"]),
    ("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n", "a", ["host a:", "ProxyJump", "more than"]),
    ("Host gpu-box\n  Port twenty-two\n", "gpu-box", ["host gpu-box:", "Port 'twenty-two'"]),
    ("Host gpu-box\n  Port 99999\n", "gpu-box", ["host gpu-box:", "99999", "not a usable"]),
    ("Host gpu-box\n  ProxyJump bad host!\n", "gpu-box", ["host 'bad host!'", "[user@]host[:port]"]),
    ("Host gpu-box\n  Port\n", "gpu-box", ["ssh_config", "Unparsable line Port"]),
    # An unbalanced quote: shlex's ValueError, once a traceback.
    ('Include "conf.d/*.conf\n', "gpu-box", ["ssh_config", "Include", "No closing quotation"]),
    ('Host gpu-box\n  UserKnownHostsFile "~/lab hosts\n', "gpu-box",
     ["host gpu-box:", "UserKnownHostsFile", "No closing quotation"]),
])
def test_what_cannot_be_used_is_one_line_naming_the_host_and_the_hop(home, text, host, words):
    config = write(home, text)
    with pytest.raises(JobError) as caught:
        route(host, str(config))
    message = str(caught.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_a_refusal_of_the_config_names_the_way_round_it_for_a_user_at_ip_host_too(home, monkeypatch):
    # ~/.ssh/config is read for host=user@ip as well (ssh obeys its Host * blocks too): the way round is one word.
    import paramiko.config

    write(home, "Host *\n  ProxyCommand nc %h %p\n")
    with pytest.raises(JobError, match="ProxyCommand .* ssh_config=/dev/null"):
        route("me@10.0.0.7")
    monkeypatch.setattr(paramiko.config, "invoke", None)          # Match exec without invoke installed
    monkeypatch.setattr(paramiko.config, "invoke_import_error", ImportError("No module named 'invoke'"))
    write(home, "Match exec true\n  User matched\n")
    with pytest.raises(JobError, match="Match exec true` runs a local command.* ssh_config=/dev/null"):
        route("me@10.0.0.7")
    assert addresses(route("me@10.0.0.7:2222", "/dev/null")) == ["me@10.0.0.7:2222"]   # no config read at all


def test_without_a_local_user_name_the_refusal_is_one_line_saying_what_to_set(home, monkeypatch):
    # A container under a uid with no passwd entry and no USER: getpass.getuser() raises, and paramiko's
    # lookup calls it for any host, a user@ip one too.
    import pwd

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    config = write(home, "Host gpu-box\n  HostName 10.0.0.7\n")
    for host in ("gpu-box", "me@gpu-box"):
        with pytest.raises(JobError) as caught:
            route(host, str(config))
        message = str(caught.value)
        assert "\n" not in message and message.startswith(f"host {host}:") and "set USER=" in message, message
    monkeypatch.setenv("USER", "envuser")                           # the way out the line names
    assert addresses(route("gpu-box", str(config))) == ["envuser@10.0.0.7:22"]


def test_a_named_config_that_does_not_exist_is_refused(home):
    with pytest.raises(JobError, match="cannot read it"):
        route("gpu-box", str(home / "nowhere"))


def test_the_ssh_key_help_puts_the_configs_identity_file_first_as_the_connection_does():
    # ssh_chain offers the IdentityFile lines (look_for_keys off), then the agent; ~/.ssh/id_* only without them.
    from autotune.config.job_keys import JOB_KEYS

    help_text = JOB_KEYS["ssh_key"]
    assert help_text.index("IdentityFile") < help_text.index("agent") < help_text.index("~/.ssh/id_*"), help_text


@pytest.mark.parametrize("text, needle", [
    ('Match exec "touch {marker}"\n  User x\n', "Match exec"),
    ('Host *\n  Match host box exec "touch {marker}"\n', "runs a local command to match"),
    ("Host box\n  HostName 127.0.0.1\n  LocalCommand touch {marker}\n", "LocalCommand in"),
    ("Host box\n  HostName 127.0.0.1\n  KnownHostsCommand /bin/sh -c 'touch {marker}'\n", "KnownHostsCommand in"),
])
def test_no_local_command_of_the_config_runs_and_the_refusal_names_the_way_out(home, tmp_path, text, needle):
    marker = tmp_path / "ran"
    write(home, text.format(marker=marker))
    with pytest.raises(JobError, match=needle) as caught:
        route("box")
    assert "ssh_config=/dev/null" in str(caught.value) and "\n" not in str(caught.value)
    assert not marker.exists(), "a command of the SSH config ran"


def test_an_include_of_a_fifo_is_refused_not_read(home, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    write(home, f"Include {fifo}\nHost box\n  HostName 127.0.0.1\n")
    with pytest.raises(JobError, match="is a FIFO"):  # reading it would wait for a writer forever
        route("box")
