"""Small breaks of an operator's first day: Ctrl-C is one line, and a flag's bad value is named, not ignored."""

import pytest

from wire_daemon.cli import main as cli


def test_ctrl_c_ends_a_command_with_one_line_and_the_shell_s_code(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_replay", interrupted)
    assert cli.main(["replay"]) == 130
    err = capsys.readouterr().err
    assert err == "wire-daemon: interrupted\n"


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_speedup_that_is_not_positive_is_refused_not_replaced_by_the_config(value, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("site: {kind: emulated}\n")
    assert cli.main(["run", "--config", str(config), "--speedup", value, "--max-iterations", "1"]) == 2
    assert "--speedup must be > 0" in capsys.readouterr().err
