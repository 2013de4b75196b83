"""pip install ./python: ember._C built by the project's CMake.

The extension is libember's CMake target `ember_python` (python/CMakeLists.txt),
built for the Python running pip.  EMBERPY_BUILD_DIR: an existing build
directory of the repository to build it in (incremental; CI uses build/);
otherwise a fresh one under pip's build area (BUILD_TESTING off).
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("EMBERPY_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "ember-cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                                   f"-DPython3_EXECUTABLE={sys.executable}",
                                   "-DBUILD_TESTING=OFF", "-DEMBER_ENABLE_CUDA=OFF"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "ember_python"])
        built = glob.glob(os.path.join(build_dir, "python", "ember", "_C*.so"))
        if len(built) != 1:
            raise RuntimeError(f"ember._C: expected one _C*.so in {build_dir}/python/ember, "
                               f"found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("ember._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
