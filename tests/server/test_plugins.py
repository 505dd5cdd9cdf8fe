"""Plugins: built-ins by import, third-party from the config (and entry points), hooks called."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from grantd import hookspecs
from grantd.config import ConfigError, validate
from grantd.plugin_manager import BUILTIN_PLUGINS, build_plugin_manager, describe_plugins

from conftest import ROOT

PLUGIN_CONFIG = '[plugins]\nmodules = ["sample_plugin"]\n'


def test_external_plugin_named_in_the_config_is_loaded_and_its_hooks_called(server_factory):
    srv = server_factory(extra=PLUGIN_CONFIG).start()
    with srv.client() as http:
        r = http.get("/sample-plugin/ping")
    assert r.status_code == 200 and r.json() == {"plugin": "sample", "issuer": srv.url}
    assert (
        (srv.directory / "sample-plugin-started").read_text().strip().isdigit()
    )  # the async startup hook ran


def test_grantd_plugins_lists_builtins_and_the_external_plugin_with_hooks(server_factory):
    srv = server_factory(extra=PLUGIN_CONFIG)
    listed = json.loads(srv.grantd("plugins", "--json", "--config", str(srv.config_path)).stdout)
    by_name = {p["name"]: p for p in listed}
    assert set(BUILTIN_PLUGINS) <= set(by_name)
    assert by_name["sample_plugin"]["source"] == "config"
    assert by_name["sample_plugin"]["version"] == "1.2.3"
    assert by_name["sample_plugin"]["hooks"] == ["register_routes", "startup"]
    assert by_name["grantd.plugins.storage_sqlite"]["hooks"] == ["storage_backends"]
    text = srv.grantd("plugins", "--config", str(srv.config_path)).stdout
    assert "sample_plugin 1.2.3 (config)" in text


def test_a_plugin_module_that_does_not_import_is_a_config_error():
    config = validate(
        {
            "version": 1,
            "admin": {"management_token": "x" * 20},
            "plugins": {"modules": ["no_such_plugin_mod"]},
        }
    )
    with pytest.raises(ConfigError, match="cannot import 'no_such_plugin_mod'"):
        build_plugin_manager(config)


def test_a_misspelled_hook_fails_fast(tmp_path, monkeypatch):
    (tmp_path / "typo_plugin.py").write_text(
        "from grantd.hookspecs import hookimpl\n@hookimpl\ndef storage_backend():\n    return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = validate(
        {"version": 1, "admin": {"management_token": "x" * 20}, "plugins": {"modules": ["typo_plugin"]}}
    )
    with pytest.raises(ConfigError, match="storage_backend"):
        build_plugin_manager(config)


def test_unknown_storage_plugin_is_a_config_error_with_a_suggestion(server_factory):
    srv = server_factory(storage='plugin = "sqlit"\npath = "grantd.db"')
    result = srv.grantd("serve", "--config", str(srv.config_path), check=False)
    assert result.returncode == 1
    assert "storage.plugin: no storage plugin named 'sqlit' (did you mean \"sqlite\"?)" in result.stderr


def test_entry_point_plugins_are_loaded(tmp_path, monkeypatch):
    """An installed distribution that registers in the `grantd` entry-point group is loaded."""
    (tmp_path / "ep_sample_plugin.py").write_text(
        "from grantd.hookspecs import hookimpl\n@hookimpl\ndef startup(app, config):\n    pass\n"
    )
    dist_info = tmp_path / "ep_sample-4.5.6.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-sample\nVersion: 4.5.6\n")
    (dist_info / "entry_points.txt").write_text("[grantd]\nep_sample = ep_sample_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = {p.name: p for p in describe_plugins(build_plugin_manager(None))}
    assert names["ep_sample"].source == "entry point"
    assert names["ep_sample"].hooks == ("startup",)


def test_every_hook_spec_is_documented_and_tested():
    specs = [name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "grantd_spec")]
    assert set(specs) >= {
        "storage_backends",
        "federation_provider_types",
        "elevate_verify",
        "startup",
        "register_routes",
    }
    guide = (ROOT / "docs" / "plugins.md").read_text()
    texts = [p.read_text() for p in (ROOT / "tests").rglob("test_*.py")]
    # This test names every hook itself: leave it out, or the check could never fail.
    tests_text = "\n".join(t.split("def test_every_hook_spec_is_documented_and_tested")[0] for t in texts)
    for name in specs:
        assert re.search(rf"^#+ `{name}", guide, re.M), f"docs/plugins.md has no section for {name}"
        assert name in tests_text, f"no test mentions the hook {name}"


def test_every_hook_spec_is_called_by_grantd():
    """Nothing speculative: a hook spec that grantd never calls is a promise to plugin authors it
    does not keep. A call is `hook.<name>` in the source of grantd (not in a test or a plugin)."""
    specs = [name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "grantd_spec")]
    source = "\n".join(p.read_text() for p in (ROOT / "appliance").rglob("*.py") if p.name != "hookspecs.py")
    for name in specs:
        assert re.search(rf"\bhook\.{name}\b", source), f"no code calls the hook {name}"
    assert (
        "sp_login_discover_idp" not in specs
    )  # SP login is a later issue; grantd.sp.ddisa is a plain library


def test_plugin_paths_make_a_site_plugin_importable_without_pythonpath(server_factory, tmp_path):
    site = tmp_path / "site-plugins"
    site.mkdir(mode=0o755)
    (site / "site_plugin_x.py").write_text((ROOT / "tests" / "plugins" / "sample_plugin.py").read_text())
    srv = server_factory(extra=f'[plugins]\nmodules = ["site_plugin_x"]\npaths = ["{site}"]\n')
    srv.env["PYTHONPATH"] = str(ROOT)  # not the plugin's directory
    srv.start()
    with srv.client() as http:
        assert http.get("/sample-plugin/ping").status_code == 200


@pytest.mark.parametrize("mode", [0o775, 0o777])
def test_plugin_paths_others_can_write_to_are_refused(tmp_path, mode):
    site = tmp_path / "open"
    site.mkdir()
    site.chmod(mode)
    config = validate(
        {
            "version": 1,
            "admin": {"management_token": "x" * 20},
            "plugins": {"modules": [], "paths": [str(site)]},
        }
    )
    with pytest.raises(ConfigError, match="writable by other users"):
        build_plugin_manager(config)
    missing = validate(
        {"version": 1, "admin": {"management_token": "x" * 20}, "plugins": {"paths": [str(tmp_path / "no")]}}
    )
    with pytest.raises(ConfigError, match="not a directory"):
        build_plugin_manager(missing)


def _notify_plugin(tmp_path):
    site = tmp_path / "site-plugins"
    site.mkdir(mode=0o755, exist_ok=True)
    (site / "notify_section_plugin.py").write_text(
        (ROOT / "tests" / "plugins" / "notify_section_plugin.py").read_text()
    )
    return f'[plugins]\nmodules = ["notify_section_plugin"]\npaths = ["{site}"]\n'


def test_config_sections_a_plugin_declares_are_checked_with_the_rest(tmp_path):
    """The hook config_sections: the plugin's `[alerts]` is known and checked by `grantd config
    validate` with every other problem, by key path; without the plugin it is an unknown key."""
    from conftest import GRANTD

    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    base = f'version = 1\n[admin]\nmanagement_token = "file:{token}"\n[server]\nprot = 1\n'
    path = tmp_path / "grantd.toml"
    path.write_text(
        base + _notify_plugin(tmp_path) + '[alerts]\nchannel = "mial"\nretries = 11\nsilent = true\n'
    )
    result = subprocess.run(
        [*GRANTD, "config", "validate", str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 1
    assert "alerts.channel: must be one of mail, matrix, got 'mial' (did you mean \"mail\"?)" in result.stderr
    assert (
        "alerts.retries: must be at most 10, got 11" in result.stderr
        and "alerts.silent: unknown key" in result.stderr
    )
    assert 'server.prot: unknown key (did you mean "server.port"?)' in result.stderr
    # the operator's commands read the file with its plugins' sections too
    path.write_text(
        base.replace("prot", "port") + _notify_plugin(tmp_path) + '[alerts]\nchannel = "matrix"\n'
    )
    listed = subprocess.run(
        [*GRANTD, "plugins", "--config", str(path), "--json"], capture_output=True, text=True, cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    assert "notify_section_plugin" in {info["name"] for info in json.loads(listed.stdout)}
    path.write_text(base + '[alerts]\nchannel = "mail"\n')  # no plugin declares it
    result = subprocess.run(
        [*GRANTD, "config", "validate", str(path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert "alerts: unknown key" in result.stderr


def test_a_declared_section_reaches_the_running_server(server_factory, tmp_path):
    """Every server process reads the file with the sections its plugins declare (config.extra)."""
    srv = server_factory(extra=_notify_plugin(tmp_path) + '[alerts]\nchannel = "matrix"\n')
    srv.start()
    with srv.client() as http:
        assert http.get("/notify-plugin/config").json() == {"channel": "matrix", "retries": 3}
