"""`lab image build`'s checks of what it is given, before any daemon is asked (no Docker here; a real
registry, where one answers for a digest)."""

import pytest
from registry_support import needs_registry, serving

from lab.errors import LabError
from lab.runtimes.user_image import check_reference, script_in_image


@pytest.mark.parametrize(
    ("ref", "host", "repository"),
    [
        ("train:1", None, "train"),
        ("team/train", None, "team/train"),
        ("127.0.0.1:5000/team/train:v1.2", "127.0.0.1:5000", "127.0.0.1:5000/team/train"),
        ("registry.example/a/b-c__d:latest", "registry.example", "registry.example/a/b-c__d"),
        ("localhost/train:1", "localhost", "localhost/train"),
    ],
)
def test_a_reference_names_its_registry_and_repository_as_docker_reads_them(ref, host, repository):
    assert check_reference(ref) == (host, repository)


@pytest.mark.parametrize(
    "ref", ["", "Train:1", "team//train", "train:", "train:-x", "train@sha256:abc", "a b", "reg.example/x:" + "t" * 129]
)
def test_a_malformed_reference_is_one_line(ref):
    with pytest.raises(LabError, match="is not an image reference") as error:
        check_reference(ref)
    assert "\n" not in str(error.value)


def test_the_script_must_lie_in_the_directory_baked(tmp_path):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "train.py").write_text("")
    (tmp_path / "outside.py").write_text("")
    assert script_in_image(code, code / "pkg" / "train.py") == "/opt/user/code/pkg/train.py"
    with pytest.raises(LabError, match="is not inside"):
        script_in_image(code, tmp_path / "outside.py")
    with pytest.raises(LabError, match="is not inside"):
        script_in_image(code, code / ".." / "outside.py")
    with pytest.raises(LabError, match="script not found"):
        script_in_image(code, code / "missing.py")
    with pytest.raises(LabError, match="is not a directory"):
        script_in_image(tmp_path / "nowhere", code / "pkg" / "train.py")


@needs_registry
def test_a_digest_is_refused_where_a_registry_says_it_holds_none_and_left_to_the_cluster_elsewhere(tmp_path):
    """A real, empty registry holds no manifest with that digest: one line naming it. No registry
    named, no digest, or a registry that does not answer: left to the cluster, which may reach
    it with its pull secret (the call returns, having asked nobody or nobody who answered)."""
    from lab.bench import free_port
    from lab.runtimes.user_image import check_digest

    digest = "sha256:" + "0" * 64
    with serving(tmp_path) as registry:
        with pytest.raises(LabError, match=rf"^image {registry}/team/train@{digest}: registry {registry} holds no "):
            check_digest(f"{registry}/team/train@{digest}", timeout_s=5)
        check_digest(f"{registry}/team/train:1", timeout_s=5)  # a tag, not a digest: not asked
    for ref in ("train:1", f"team/train@{digest}", f"127.0.0.1:{free_port()}/train@{digest}"):
        assert check_digest(ref, timeout_s=2) is None


@pytest.mark.parametrize("name", ["my code", "evil\nLABEL x=1\nCOPY / /stolen", "..", "ünïcode", ".hidden"])
def test_a_folder_name_never_adds_to_the_dockerfile(tmp_path, name):
    """`lab image build DIR` pasted DIR's name into its Dockerfile: a newline added instructions."""
    from lab.runtimes.user_image import dockerfile, folder_in_image

    code = tmp_path / name if name != ".." else tmp_path / "a" / ".."
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text("print('hi')\n")
    text = dockerfile("torchrun-lab:cpu", folder_in_image(code))
    lines = text.splitlines()
    assert len(lines) == 2 and lines[0] == "FROM torchrun-lab:cpu" and lines[1].startswith("COPY . /opt/user/")
    assert len(lines[1].split()) == 3  # one source, one destination: no space split it
    assert script_in_image(code, code / "train.py") == f"/opt/user/{folder_in_image(code)}/train.py"
