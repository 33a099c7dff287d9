"""Package discovery: statekit with every subpackage found by itself, and the CLI (cli/) as statekit_cli."""

from setuptools import find_packages, setup

# The Catalyst rule's Java sources ship as package data of their own directory (compiled on first use).
JAVA = "statekit.spark.java.io.statekit.spark"

setup(packages=find_packages(include=["statekit", "statekit.*"]) + [JAVA, "statekit_cli"])
