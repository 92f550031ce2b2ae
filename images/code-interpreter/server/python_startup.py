"""Runs once in every Python kernel at start (sent by the server as a silent execution).

Adds IPython display formatters so results carry E2B's extra representations:
  e2b/data          a pandas DataFrame as {column: [values]} (timestamps ISO 8601, NaN null)
  e2b/chart         a matplotlib Figure read as a chart (charts.py)
  application/json  plain dicts and lists that JSON can hold (as E2B's kernel gives)
and turns colour off in tracebacks. Touches nothing in the user's namespace: every name
here lives in this function's scope.
"""


def _sbx_setup():
    import importlib.util
    import json
    import math
    import os
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    here = os.path.dirname(os.path.abspath(__SBX_FILE__))  # noqa: F821 (set by the server)
    charts = {}

    def load_charts():
        if "m" not in charts:
            spec = importlib.util.spec_from_file_location("_sbx_charts", os.path.join(here, "charts.py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            charts["m"] = mod
        return charts["m"]

    def clean(v):
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
        if hasattr(v, "isoformat"):
            return v.isoformat()
        if hasattr(v, "item"):  # numpy scalars
            try:
                return clean(v.item())
            except Exception:  # noqa: BLE001
                return str(v)
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return str(v)

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            out = {}
            for col, values in obj.to_dict(orient="list").items():
                out[str(col)] = [clean(v) for v in values]
            return out

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

        def __call__(self, obj):
            if "matplotlib" not in sys.modules:
                return super().__call__(obj)
            from matplotlib.figure import Figure

            if not isinstance(obj, Figure):
                return super().__call__(obj)
            try:
                return load_charts().figure_to_chart(obj)
            except Exception:  # noqa: BLE001
                return None

    class PlainJSONFormatter(JSONFormatter):
        def __call__(self, obj):
            if isinstance(obj, (dict, list)):
                try:
                    return json.loads(json.dumps(obj, allow_nan=False, default=str))
                except (TypeError, ValueError):
                    pass
            return super().__call__(obj)

    fmt = ip.display_formatter
    fmt.formatters["e2b/data"] = DataFormatter(parent=fmt)
    fmt.formatters["e2b/chart"] = ChartFormatter(parent=fmt)
    fmt.formatters["application/json"] = PlainJSONFormatter(parent=fmt)
    try:
        ip.run_line_magic("colors", "NoColor")
    except Exception:  # noqa: BLE001
        pass
    try:
        fmt.formatters["text/plain"].max_seq_length = 0
    except Exception:  # noqa: BLE001
        pass
    # Box plots keep the statistics they drew, for charts.py. matplotlib is patched when
    # it is first imported (an import hook), so kernels that never plot do not load it.
    def patch(axes_module):
        orig = axes_module.Axes.boxplot
        if getattr(orig, "_sbx", False):
            return

        def boxplot(self, x, *args, **kwargs):
            out = orig(self, x, *args, **kwargs)
            try:
                from matplotlib import cbook

                stats = cbook.boxplot_stats(x, whis=kwargs.get("whis", 1.5), labels=kwargs.get("labels"))
                self._sbx_boxes = getattr(self, "_sbx_boxes", []) + stats
            except Exception:  # noqa: BLE001
                pass
            return out

        boxplot._sbx = True
        axes_module.Axes.boxplot = boxplot

    import importlib.abc

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "matplotlib.axes":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    patch(module)
                except Exception:  # noqa: BLE001
                    pass

            spec.loader.exec_module = exec_module
            return spec

    if "matplotlib.axes" in sys.modules:
        patch(sys.modules["matplotlib.axes"])
    else:
        sys.meta_path.insert(0, Hook())

_sbx_setup()
del _sbx_setup
