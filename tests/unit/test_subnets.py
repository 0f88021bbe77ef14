"""Which /24 a lab's Docker network takes, decided on the daemon's networks as data."""

import ipaddress

import pytest

from lab.errors import LabError
from lab.runtimes import subnets
from lab.runtimes.docker_runtime import SUPERNETS


def net(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text)


def test_a_free_block_of_the_first_range_is_taken_and_avoids_every_network_on_it():
    taken = {"tlab-aa-net": [net("172.29.5.0/24")], "bridge": [net("172.17.0.0/16")]}
    block = subnets.free_block_among(SUPERNETS, taken, "05", "LAB_DOCKER_SUBNET")
    assert block.subnet_of(net("172.29.0.0/16")) and block != net("172.29.5.0/24")


def test_a_network_given_all_of_the_first_range_moves_the_lab_to_the_next():
    """Docker's default pools hold 172.29.0.0/16: compose's network can be given it whole."""
    taken = {"docker_lab": [net("172.29.0.0/16")]}
    block = subnets.free_block_among(SUPERNETS, taken, "3f", "LAB_DOCKER_SUBNET")
    assert block.subnet_of(net(SUPERNETS[1]))


def test_when_every_range_is_taken_the_error_names_who_holds_them_and_the_override():
    taken = {"docker_lab": [net("172.29.0.0/16")], "wide": [net("10.0.0.0/8")], "bridge": [net("172.17.0.0/16")]}
    with pytest.raises(LabError) as caught:
        subnets.free_block_among(SUPERNETS, taken, "00", "LAB_DOCKER_SUBNET")
    message = str(caught.value)
    assert "(docker_lab, wide)" in message and "LAB_DOCKER_SUBNET" in message and "\n" not in message
