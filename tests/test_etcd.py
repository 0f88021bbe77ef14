"""The lab's etcd for the etcd-v2 rendezvous: a real etcd server, started and stopped by the lab."""

import urllib.request

import pytest

from lab import procs
from lab.errors import LabError
from lab.runtimes import etcd


def test_missing_etcd_is_a_one_line_error_naming_the_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LabError, match="apt-get install etcd-server"):
        etcd.check_installed()


@pytest.mark.skipif(not etcd.shutil.which("etcd"), reason="etcd-server is not installed (scripts/host-deps.sh)")
def test_etcd_serves_the_v2_api_and_carries_the_lab_mark(tmp_path):
    run_dir = str(tmp_path)
    url = etcd.start(tmp_path / "etcd", "127.0.0.1", 23790, run_dir)
    try:
        request = urllib.request.Request(f"{url}/v2/keys/lab-test", data=b"value=1", method="PUT")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status in (200, 201)
        with urllib.request.urlopen(f"{url}/v2/keys/lab-test", timeout=5) as response:
            assert b'"value":"1"' in response.read()
        assert len(procs.marked_pids(run_dir)) == 1
    finally:
        procs.signal_all(procs.marked_pids(run_dir), 9)
        procs.wait_gone(procs.marked_pids(run_dir), 5)
    assert procs.marked_pids(run_dir) == []
