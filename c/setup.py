"""Build of walspark's optional compiled hot path (Cython, the machine's C compiler)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("walspark_c._rows", ["src/walspark_c/_rows.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
    ),
)
