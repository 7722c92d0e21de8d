"""CPU kernels (numpy), one module per op family."""
import importlib
import pkgutil


def load_all():
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
