"""Trainium platform figures (data/platforms.toml, with AWS's sources) and the per-core HBM
budget each logical-core configuration gives."""
import functools
import os
import tomllib

DATA = os.path.join(os.path.dirname(__file__), "data", "platforms.toml")


@functools.cache
def platforms():
    """{name: table} as in data/platforms.toml."""
    with open(DATA, "rb") as handle:
        return tomllib.load(handle)


def logical_cores_per_chip(name, lnc):
    return platforms()[name]["physical_cores_per_chip"] // lnc


def hbm_bytes_per_core(name, lnc):
    """HBM of one logical core: the chip's HBM shared evenly by its logical cores."""
    return platforms()[name]["hbm_bytes_per_chip"] // logical_cores_per_chip(name, lnc)


def cores_per_instance(name, lnc):
    return logical_cores_per_chip(name, lnc) * platforms()[name]["chips_per_instance"]
