"""The operator's first five minutes: enroll an agent and sign it in (issue: appliance core)."""

from conftest import enroll, sign_in


def test_enroll_and_sign_in_with_raw_and_ssh_signatures(server, tmp_path):
    agent = enroll(server, tmp_path)
    assert sign_in(server, agent)
    assert sign_in(server, agent, ssh=True)
