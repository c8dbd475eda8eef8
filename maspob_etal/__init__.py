__version__ = "0.2.0"

# `help(fn)` shows what each argument means. The notebooks document arguments as comments beside each parameter
# (fastcore's "docments"); when a submodule of this package is imported, every public function, class and method
# it defines gets those comments appended to its docstring as a numpy-style "Parameters" section. The docs pages
# render the same comments as a table, and nbdev's `show_doc` drops a section that repeats them.
import importlib.abc as _abc, importlib.machinery as _machinery, inspect as _inspect, sys as _sys

def _param_section(obj)->str:
    "A numpy-style Parameters section from the parameter comments of `obj` ('' when it has none)."
    from fastcore.docments import docments, _type_str
    try: dm = docments(obj, full=True)
    except Exception: return ""
    rows = []
    for name, d in dm.items():
        if name in ("return", "self", "cls") or not d.get("docment"): continue
        typ = _type_str(d["anno"])
        rows.append(f"{name} : {typ}\n    {d['docment']}" + ("" if d["default"] is _inspect.Parameter.empty else f" (default {d['default']!r})"))
    return "Parameters\n----------\n" + "\n".join(rows) if rows else ""

def _document(module):
    "Append the Parameters section to the public functions, classes and methods `module` defines."
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name, None)
        targets = [obj] if _inspect.isfunction(obj) else []
        if _inspect.isclass(obj) and obj.__module__ == module.__name__:
            targets += [obj] + [f for k, f in vars(obj).items() if _inspect.isfunction(f) and not k.startswith("_")]
        for f in targets:
            if getattr(f, "__maspob_params__", False): continue
            sec = _param_section(f)
            if sec:
                try: f.__doc__ = (_inspect.cleandoc(f.__doc__ or "") + "\n\n" + sec).strip()
                except (AttributeError, TypeError): continue
            try: f.__maspob_params__ = True
            except (AttributeError, TypeError): pass

class _ParamDocs(_abc.MetaPathFinder):
    "Finds this package's submodules as usual, and documents their parameters once they have run."
    def find_spec(self, name, path, target=None):
        if not name.startswith(__name__ + ".") or name.rsplit(".", 1)[-1].startswith("_"): return None
        spec = _machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"): return spec
        run = spec.loader.exec_module
        def exec_module(module, run=run):
            run(module); _document(module)
        spec.loader.exec_module = exec_module
        return spec

if not any(isinstance(f, _ParamDocs) for f in _sys.meta_path): _sys.meta_path.insert(0, _ParamDocs())
