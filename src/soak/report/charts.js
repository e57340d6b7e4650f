// The report's zoomable charts: uPlot (embedded above this script) draws each chart of the
// page's data; a drag across any chart zooms every chart to that time, a double-click shows the
// whole run again. Axes read as the static charts do (report/scale.rs): elapsed time as 1h30m
// with the clock (UTC) under it, sizes in the binary unit of the largest, whole-number counts,
// step times in ms under a second, a trainer's numbers with the digits their range needs. A
// chart may fill a band between two of its lines (the fastest and slowest step around the
// median), and a small one (a trainer's number) is shorter. Without script, or should anything
// here fail, the static SVG charts stay.
(function () {
  "use strict";
  var holder = document.getElementById("soak-data");
  if (!holder || typeof uPlot !== "function") return;
  var d = JSON.parse(holder.textContent);
  var STEPS = d.time_steps;
  var SIZES = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

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
  function clock(s) {
    if (d.started_at == null) return "";
    var secs = ((Math.round(d.started_at + s) % 86400) + 86400) % 86400;
    var text = two(Math.floor(secs / 3600)) + ":" + two(Math.floor(secs % 3600 / 60));
    return secs % 60 ? text + ":" + two(secs % 60) : text;
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
        var mib = unit === "mebibytes" ? 1048576 : 1;
        var u = sizeUnit(Math.max(top, v) * mib);
        return trimmed(v * mib / u[1]) + " " + u[0];
    }
  }
  // Value-axis steps: whole numbers for counts; round numbers of a binary unit for sizes.
  function increments(unit) {
    var out = [], m = [1, 2, 5, 10, 20, 50, 100, 200, 500], p, i;
    if (unit === "bytes" || unit === "mebibytes") {
      for (p = 0; p < 6; p++) for (i = 0; i < m.length; i++) {
        out.push(m[i] * Math.pow(1024, p) / (unit === "mebibytes" ? 1048576 : 1));
      }
      return out;
    }
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
    var data = [times], series = [{
      label: "time",
      value: function (u, v) { return v == null ? "–" : elapsed(v) + (d.started_at == null ? "" : " · " + clock(v) + " UTC"); }
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
        value: function (u, v) { return label(spec.unit, v, spec.unit === "number" ? Math.max(top, -bottom) : top); }
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
          var span = Math.max(u.scales.y.max, -u.scales.y.min);
          return splits.map(function (v) { return label(spec.unit, v, span); });
        }
      }
    ];
    if (d.started_at != null) {
      axes.splice(1, 0, {
        scale: "x", side: 2, incrs: STEPS, space: 70, size: 14, gap: 0, grid: { show: false }, ticks: { show: false },
        stroke: "#999", font: "10px system-ui,sans-serif",
        values: function (u, splits) { return splits.map(clock); }
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
      hooks: { drawClear: [shade], draw: [mark], setScale: [follow] }
    };
    plots.push(new uPlot(opts, data, box));
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
})();
