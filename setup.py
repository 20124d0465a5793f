"""Package discovery (everything else is in pyproject.toml).

``launcher/`` is a top-level folder of the repository but installs as ``minimpi.launcher``,
so that it never claims the generic import name ``launcher``; setuptools' automatic
discovery cannot express that mapping, so the package list is computed here instead of
being kept by hand.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["minimpi", "minimpi.*"])
    + ["minimpi.launcher." + p for p in find_packages("launcher")] + ["minimpi.launcher"],
    package_dir={"minimpi.launcher": "launcher"},
)
