"""Reads a matplotlib Figure as a chart in E2B's shapes (loaded in the Python kernel).

`figure_to_chart(fig)` returns a dict, or None for a figure with nothing drawn:
  line / scatter   {type, title, x_label, y_label, x_unit, y_unit, x_ticks, x_tick_labels,
                    x_scale, y_ticks, y_tick_labels, y_scale, elements: [{label, points}]}
  bar              {type, title, x_label, y_label, x_unit, y_unit, elements: [{label, group, value}]}
  pie              {type, title, elements: [{label, angle, radius}]}
  box_and_whisker  {type, title, x_label, y_label, x_unit, y_unit, elements: [{label, min,
                    first_quartile, median, third_quartile, max, outliers}]}
  superchart       {type, title, elements: [one of the above per axes]} (several axes)
  unknown          {type, title, elements: []}
Units are read from labels like "Time (s)" or "Price [USD]". Dates become ISO 8601 strings.
Box plots are read from the statistics recorded by python_startup.py's boxplot wrapper.
"""

import math
import re

from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import Wedge

UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def _num(v):
    if hasattr(v, "item"):
        v = v.item()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, (int, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else (int(f) if f.is_integer() and isinstance(v, int) else f)
    return str(v)


def _is_date_axis(axis):
    try:
        import matplotlib.dates as mdates

        conv = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
        return isinstance(conv, (mdates.DateConverter, mdates.ConciseDateConverter, mdates._SwitchableDateConverter))
    except Exception:  # noqa: BLE001
        return False


def _is_category_axis(axis):
    units = getattr(axis, "units", None)
    return units is not None and hasattr(units, "_mapping")


def _scale(ax, axis, which):
    if _is_date_axis(axis):
        return "datetime"
    if _is_category_axis(axis):
        return "categorical"
    return ax.get_xscale() if which == "x" else ax.get_yscale()


def _coord(axis, v):
    if _is_date_axis(axis):
        try:
            import matplotlib.dates as mdates

            return mdates.num2date(float(v)).isoformat()
        except Exception:  # noqa: BLE001
            return _num(v)
    if _is_category_axis(axis):
        inv = {i: k for k, i in axis.units._mapping.items()}
        try:
            return inv.get(int(round(float(v))), _num(v))
        except (TypeError, ValueError):
            return _num(v)
    return _num(v)


def _labels(ax):
    out = {}
    for which, text in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        out[f"{which}_label"] = text or None
        m = UNIT.search(text or "")
        out[f"{which}_unit"] = (m.group(1) or m.group(2)) if m else None
    return out


def _ticks(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    ticks = ax.get_xticks() if which == "x" else ax.get_yticks()
    labels = ax.get_xticklabels() if which == "x" else ax.get_yticklabels()
    return {
        f"{which}_ticks": [_coord(axis, t) for t in ticks],
        f"{which}_tick_labels": [t.get_text() for t in labels],
        f"{which}_scale": _scale(ax, axis, which),
    }


def _is_grid(line):
    return line in getattr(line.axes, "get_xgridlines", lambda: [])() or line in line.axes.get_ygridlines()


def _user_lines(ax):
    return [ln for ln in ax.get_lines() if not _is_grid(ln)]


def _line_label(line, i):
    label = str(line.get_label())
    return f"Line {i}" if label.startswith("_") else label


def _kind(ax):
    if getattr(ax, "_sbx_boxes", None):
        return "box_and_whisker"
    if any(isinstance(p, Wedge) for p in ax.patches):
        return "pie"
    if any(isinstance(c, BarContainer) for c in ax.containers):
        return "bar"
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    lines = _user_lines(ax)
    if scatters and not lines:
        return "scatter"
    if lines and not scatters and not ax.patches:
        return "line"
    return "unknown"


def _point_chart(ax, kind):
    chart = {"type": kind, "title": ax.get_title() or None, **_labels(ax), **_ticks(ax, "x"), **_ticks(ax, "y")}
    elements = []
    if kind == "line":
        for i, ln in enumerate(_user_lines(ax)):
            xs, ys = ln.get_xdata(), ln.get_ydata()
            pts = [[_coord(ax.xaxis, x), _coord(ax.yaxis, y)] for x, y in zip(xs, ys)]
            elements.append({"label": _line_label(ln, i), "points": pts})
    else:
        for i, c in enumerate(ax.collections):
            if not isinstance(c, PathCollection):
                continue
            pts = [[_coord(ax.xaxis, x), _coord(ax.yaxis, y)] for x, y in c.get_offsets()]
            label = str(c.get_label())
            elements.append({"label": f"Series {i}" if label.startswith("_") else label, "points": pts})
    chart["elements"] = elements
    return chart


def _bar_chart(ax):
    chart = {"type": "bar", "title": ax.get_title() or None, **_labels(ax)}
    elements = []
    for gi, cont in enumerate(c for c in ax.containers if isinstance(c, BarContainer)):
        group = str(cont.get_label())
        if group.startswith("_"):
            group = f"Group {gi}"
        horizontal = getattr(cont, "orientation", "vertical") == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        for rect in cont:
            if horizontal:
                pos, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
            else:
                pos, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
            elements.append({"label": str(_coord(axis, pos)), "group": group, "value": _num(value)})
    if elements and all(getattr(c, "orientation", "") == "horizontal" for c in ax.containers):
        chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
        chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]
    chart["elements"] = elements
    return chart


def _pie_chart(ax):
    elements = []
    for w in ax.patches:
        if isinstance(w, Wedge):
            elements.append(
                {"label": str(w.get_label()), "angle": round(abs(w.theta2 - w.theta1), 6), "radius": _num(w.r)}
            )
    return {"type": "pie", "title": ax.get_title() or None, "elements": elements}


def _box_chart(ax):
    chart = {"type": "box_and_whisker", "title": ax.get_title() or None, **_labels(ax)}
    ticks = [t.get_text() for t in (ax.get_xticklabels() or [])]
    elements = []
    for i, s in enumerate(ax._sbx_boxes):
        label = s.get("label")
        if label is None:
            label = ticks[i] if i < len(ticks) and ticks[i] else str(i + 1)
        elements.append(
            {
                "label": str(label),
                "min": _num(s["whislo"]),
                "first_quartile": _num(s["q1"]),
                "median": _num(s["med"]),
                "third_quartile": _num(s["q3"]),
                "max": _num(s["whishi"]),
                "outliers": [_num(v) for v in s.get("fliers", [])],
            }
        )
    chart["elements"] = elements
    return chart


def axes_to_chart(ax):
    kind = _kind(ax)
    if kind in ("line", "scatter"):
        return _point_chart(ax, kind)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return {"type": "unknown", "title": ax.get_title() or None, "elements": []}


def figure_to_chart(fig):
    axes = [ax for ax in fig.get_axes() if ax.has_data() or getattr(ax, "_sbx_boxes", None)]
    if not axes:
        return None
    try:
        fig.canvas.draw()  # tick labels are only known once drawn
    except Exception:  # noqa: BLE001
        pass
    if len(axes) == 1:
        return axes_to_chart(axes[0])
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else None
    return {"type": "superchart", "title": title or None, "elements": [axes_to_chart(ax) for ax in axes]}
