// The report's zoomable charts: uPlot (embedded above this script) draws each chart of the
// page's data; a drag across any chart zooms every chart to that time, a double-click shows the
// whole run again. Axes read as the static charts do (report/scale.rs): elapsed time as 1h30m
// with the clock (UTC) under it, every clock label with seconds or none, sizes on the steps the
// page gives (`size_steps`) and read in the unit their step is round in, whole-number counts,
// step times in ms under a second, a trainer's numbers with the digits their range needs. A
// legend names its lines, and gives their values where the pointer is. A chart may fill a band
// between two of its lines (the fastest and slowest step around the median), and a small one
// (a trainer's number) is shorter. Without script, or should anything here fail, the static SVG
// charts stay. The charts and their axes' labels are `window.unilabCharts`, for the page's
// tests (and a reader's console).
(function () {
  "use strict";
  var holder = document.getElementById("soak-data");
  if (!holder || typeof uPlot !== "function") return;
  var d = JSON.parse(holder.textContent);
  var STEPS = d.time_steps;
  var SIZES = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  var MIB = 1048576;

  function trimmed(v) {
    var t = v.toFixed(2).replace(/0+$/, "").replace(/\.$/, "");
    return t === "-0" ? "0" : t;
  }
  function elapsed(s) {
    if (s <= 0) return "0";
    if (s < 10 && Math.abs(s - Math.round(s)) > 1e-9) return trimmed(s) + "s";
    var secs = Math.round(s);
    var parts = [[Math.floor(secs / 86400), "d"], [Math.floor(secs % 86400 / 3600), "h"],
      [Math.floor(secs % 3600 / 60), "m"], [secs % 60, "s"]];
    var first = 0;
    while (first < 3 && parts[first][0] === 0) first++;
    var text = "";
    for (var i = first; i < Math.min(first + 2, 4); i++) {
      if (parts[i][0] > 0 || text === "") text += parts[i][0] + parts[i][1];
    }
    return text;
  }
  function two(n) { return (n < 10 ? "0" : "") + n; }
  // The clock of a time axis that started at `start` (Unix seconds): every label with seconds
  // when any has them (report/svg.rs `clock_labels`).
  function clocks(start, splits) {
    var secs = splits.map(function (s) { return ((Math.round(start + s) % 86400) + 86400) % 86400; });
    var seconds = secs.some(function (t) { return t % 60 !== 0; });
    return secs.map(function (t) {
      var text = two(Math.floor(t / 3600)) + ":" + two(Math.floor(t % 3600 / 60));
      return seconds ? text + ":" + two(t % 60) : text;
    });
  }
  function clock(s) {
    return d.started_at == null ? "" : clocks(d.started_at, [s])[0];
  }
  // A trainer's number on an axis whose largest magnitude is top (report/scale.rs `number`).
  function number(v, top) {
    top = Math.max(Math.abs(top), Math.abs(v));
    var prefixes = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < prefixes.length; i++) {
      if (top >= 10 * prefixes[i][0]) return trimmed(v / prefixes[i][0]) + prefixes[i][1];
    }
    if (v === 0 || top === 0) return "0";
    var decimals = Math.min(12, Math.max(0, 2 - Math.floor(Math.log10(top))));
    var t = v.toFixed(decimals);
    if (t.indexOf(".") >= 0) t = t.replace(/0+$/, "").replace(/\.$/, "");
    return t === "-0" ? "0" : t;
  }
  function sizeUnit(top) {
    var per = 1, i = 0;
    while (i + 1 < SIZES.length && top >= per * 1024) { per *= 1024; i++; }
    return [SIZES[i], per];
  }
  // The unit an axis of sizes `step` bytes apart reads in: the largest in which the step is a
  // whole number of quarters, at least one (report/scale.rs `step_unit`).
  function stepUnit(step) {
    for (var i = SIZES.length - 1; i > 0; i--) {
      var quarters = step / Math.pow(1024, i) * 4;
      if (quarters >= 1 && Math.abs(quarters - Math.round(quarters)) < 1e-6) return [SIZES[i], Math.pow(1024, i)];
    }
    return [SIZES[0], 1];
  }
  function label(unit, v, top) {
    if (v == null) return "–";
    switch (unit) {
      case "percent": return trimmed(v) + "%";
      case "celsius": return trimmed(v) + " °C";
      case "watts": return trimmed(v) + " W";
      case "count": return trimmed(v);
      case "seconds": return Math.abs(top) < 1 ? trimmed(v * 1000) + "ms" : trimmed(v) + "s";
      case "number": return number(v, top);
      default:
        var mib = unit === "mebibytes" ? MIB : 1;
        var u = sizeUnit(Math.max(top, v) * mib);
        return trimmed(v * mib / u[1]) + " " + u[0];
    }
  }
  function isSize(unit) { return unit === "bytes" || unit === "mebibytes"; }
  // The steps a size axis takes, in its values (MiB for nvidia-smi's): the page's list.
  function sizeSteps(unit) {
    var per = unit === "mebibytes" ? MIB : 1;
    return d.size_steps.map(function (s) { return s / per; });
  }
  // A value axis's labels at `splits` (evenly spaced) whose largest magnitude is `span`.
  function axisLabels(unit, splits, span) {
    if (!isSize(unit)) return splits.map(function (v) { return label(unit, v, span); });
    var per = unit === "mebibytes" ? MIB : 1;
    var step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : Math.abs(splits[0] || 0);
    var u = stepUnit(step * per);
    return splits.map(function (v) { return trimmed(v * per / u[1]) + " " + u[0]; });
  }
  // Value-axis steps: whole numbers for counts; the page's steps for sizes.
  function increments(unit) {
    if (isSize(unit)) return sizeSteps(unit);
    var out = [], p;
    var lowest = unit === "count" ? 0 : unit === "seconds" || unit === "number" ? -9 : -2;
    for (p = lowest; p < 16; p++) {
      out.push(Math.pow(10, p), 2 * Math.pow(10, p), 5 * Math.pow(10, p));
    }
    return out;
  }

  // The time axis spans the run, from 0 to the verdict, whatever was sampled.
  var times = d.data[0];
  var columns = d.data.slice(1);
  if (times.length === 0 || times[0] > 0) {
    times.unshift(0);
    columns.forEach(function (c) { c.unshift(null); });
  }
  if (times[times.length - 1] < d.end) {
    times.push(d.end);
    columns.forEach(function (c) { c.push(null); });
  }

  function shade(u) {
    var ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
    ctx.save();
    ctx.fillStyle = "rgba(240,160,48,0.14)";
    d.bands.forEach(function (b) {
      var a = u.valToPos(b[0], "x", true), z = u.valToPos(b[1], "x", true);
      ctx.fillRect(a, top, Math.max(z - a, 1), height);
    });
    ctx.restore();
  }
  function mark(u) {
    var ctx = u.ctx, top = u.bbox.top, bottom = top + u.bbox.height;
    ctx.save();
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    d.markers.forEach(function (m) {
      ctx.lineWidth = (m.width || 1.5) * devicePixelRatio;
      var x = Math.round(u.valToPos(m.at, "x", true));
      ctx.strokeStyle = m.color;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
      ctx.stroke();
    });
    ctx.restore();
  }

  // A legend at rest (no pointer over its chart) reads as uPlot's static one: names only.
  function rest(u) {
    var legend = u.root.querySelector(".u-legend");
    if (legend) legend.classList.toggle("u-live", u.cursor.idx != null);
  }

  var plots = [], heights = [];
  var syncing = false;
  function follow(u, key) {
    if (key !== "x" || syncing) return;
    syncing = true;
    plots.forEach(function (p) {
      if (p !== u) p.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
    });
    syncing = false;
  }

  d.specs.forEach(function (spec) {
    var box = document.querySelector("#chart-" + spec.id + " .live");
    if (!box) return;
    // Without a pointer over the chart (`idx` null) a legend names its lines, no values.
    var data = [times], series = [{
      label: "time",
      value: function (u, v, s, idx) {
        if (idx == null) return "";
        return v == null ? "–" : elapsed(v) + (d.started_at == null ? "" : " · " + clock(v) + " UTC");
      }
    }];
    var top = 0, bottom = 0;
    spec.series.forEach(function (s) {
      var values = columns[d.used.indexOf(s.column)];
      values.forEach(function (v) {
        if (v != null && v > top) top = v;
        if (v != null && v < bottom) bottom = v;
      });
      data.push(values);
      series.push({
        label: s.name,
        stroke: s.color,
        width: s.width,
        dash: s.dash ? [6, 4] : undefined,
        spanGaps: !!s.span_gaps,
        points: { show: false },
        value: function (u, v, s, idx) {
          return idx == null ? "" : label(spec.unit, v, spec.unit === "number" ? Math.max(top, -bottom) : top);
        }
      });
    });
    // A band from the lower line up to the upper one (uPlot counts the time as series 0).
    var bands = [];
    if (spec.band) {
      var find = function (column) {
        for (var i = 0; i < spec.series.length; i++) if (spec.series[i].column === column) return i + 1;
        return -1;
      };
      var upper = find(spec.band.upper), lower = find(spec.band.lower);
      if (upper > 0 && lower > 0) bands.push({ series: [upper, lower], fill: spec.band.color + "2e" });
    }
    var axes = [
      { scale: "x", incrs: STEPS, space: 70, size: 28, values: function (u, splits) { return splits.map(elapsed); } },
      {
        scale: "y", size: 76, incrs: increments(spec.unit),
        values: function (u, splits) {
          return axisLabels(spec.unit, splits, Math.max(u.scales.y.max, -u.scales.y.min));
        }
      }
    ];
    if (d.started_at != null) {
      axes.splice(1, 0, {
        scale: "x", side: 2, incrs: STEPS, space: 70, size: 14, gap: 0, grid: { show: false }, ticks: { show: false },
        stroke: "#999", font: "10px system-ui,sans-serif",
        values: function (u, splits) { return clocks(d.started_at, splits); }
      });
    }
    var height = spec.small ? 160 : 210;
    // A trainer's numbers may be negative; every other quantity's axis starts at 0.
    var range = spec.unit === "number"
      ? function (u, min, max) {
        var low = Math.min(0, min * 1.08), high = Math.max(0, max * 1.08);
        return [low, high > low ? high : low + 1];
      }
      : function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; };
    var opts = {
      width: box.clientWidth || 800,
      height: height,
      series: series,
      bands: bands,
      axes: axes,
      scales: {
        x: { time: false },
        y: { range: range }
      },
      cursor: { sync: { key: "soak" }, drag: { x: true, y: false } },
      hooks: { drawClear: [shade], draw: [mark], setScale: [follow], setLegend: [rest] }
    };
    var plot = new uPlot(opts, data, box);
    rest(plot);
    plots.push(plot);
    heights.push(height);
  });
  if (plots.length === 0) return;
  document.documentElement.classList.add("zoomable");
  function fit() {
    plots.forEach(function (p, i) {
      var box = p.root.parentNode;
      p.setSize({ width: box.clientWidth, height: heights[i] });
    });
  }
  fit();
  window.addEventListener("resize", fit);
  window.unilabCharts = { plots: plots, axisLabels: axisLabels, sizeSteps: sizeSteps, clocks: clocks };
})();
