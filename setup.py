"""Package discovery: statekit with every subpackage found by itself, and the CLI (cli/) as statekit_cli."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["statekit", "statekit.*"]) + ["statekit_cli"])
