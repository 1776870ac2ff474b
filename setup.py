"""One import package, `firstgate`, whose subpackages are the repository's
top-level folders: `firstgate.runtime` is `runtime/`, and so on. The folders
stay where the project has always kept them; only the installed names move
under the namespace (nothing installs a top-level `runtime` or `store`)."""

from setuptools import find_packages, setup

# The layers, top to bottom (tests/unit/test_layers.py keeps their order).
FOLDERS = (
    "serve",
    "runtime",
    "nodes",
    "plugin_daemon_client",
    "connectors",
    "sandbox",
    "store",
    "common",
    "locales",
)

package_dir = {"firstgate": "firstgate"}
packages = ["firstgate"]
for folder in FOLDERS:
    package_dir[f"firstgate.{folder}"] = folder
    packages += [f"firstgate.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(package_dir=package_dir, packages=packages)
