"""`lab bench collectives` refuses sizes the machine cannot hold before any job starts
(issue 52, item 18: --ceiling-bytes was allocated unchecked)."""

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.bench.collectives import check_memory
from lab.errors import LabError


@pytest.mark.parametrize(
    ("world", "largest", "ceiling", "refused"),
    [
        (4, 16 << 20, 256 << 20, None),
        (4, 16 << 20, 600 << 20, "--ceiling-bytes"),  # two 600 MiB buffers in 1000 MiB
        (4, 16 << 20, 1 << 20, None),
        (8, 16 << 20, 1 << 20, "--max-bytes"),  # 8 ranks x 10 buffers x 16 MiB
    ],
)
def test_sizes_are_checked_against_the_memory_available(world, largest, ceiling, refused):
    if refused is None:
        check_memory(world, largest, ceiling, available=1000)
    else:
        with pytest.raises(LabError, match=refused):
            check_memory(world, largest, ceiling, available=1000)


def test_the_command_refuses_a_ceiling_larger_than_this_machine(capsys):
    out = lab_in_process(capsys, "bench", "collectives", "--ceiling-bytes", "4096G")
    assert_one_line_error(out, "--ceiling-bytes", "MiB available")
