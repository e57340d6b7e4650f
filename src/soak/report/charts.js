// The report's zoomable charts: uPlot (embedded above this script) draws each chart of the
// page's data; a drag across any chart zooms every chart to that time, a double-click shows the
// whole run again. Axes read as the static charts do (report/scale.rs): elapsed time as 1h30m
// with the clock (UTC) under it, sizes in the binary unit of the largest, whole-number counts.
// Without script, or should anything here fail, the static SVG charts stay.
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
    for (p = unit === "count" ? 0 : -2; p < 16; p++) {
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

  var plots = [];
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
    var top = 0;
    spec.series.forEach(function (s) {
      var values = columns[d.used.indexOf(s.column)];
      values.forEach(function (v) { if (v != null && v > top) top = v; });
      data.push(values);
      series.push({
        label: s.name,
        stroke: s.color,
        width: s.width,
        dash: s.dash ? [6, 4] : undefined,
        spanGaps: !!s.span_gaps,
        points: { show: false },
        value: function (u, v) { return label(spec.unit, v, top); }
      });
    });
    var axes = [
      { scale: "x", incrs: STEPS, space: 70, size: 28, values: function (u, splits) { return splits.map(elapsed); } },
      {
        scale: "y", size: 76, incrs: increments(spec.unit),
        values: function (u, splits) { return splits.map(function (v) { return label(spec.unit, v, u.scales.y.max); }); }
      }
    ];
    if (d.started_at != null) {
      axes.splice(1, 0, {
        scale: "x", side: 2, incrs: STEPS, space: 70, size: 14, gap: 0, grid: { show: false }, ticks: { show: false },
        stroke: "#999", font: "10px system-ui,sans-serif",
        values: function (u, splits) { return splits.map(clock); }
      });
    }
    var opts = {
      width: box.clientWidth || 800,
      height: 210,
      series: series,
      axes: axes,
      scales: {
        x: { time: false },
        y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; } }
      },
      cursor: { sync: { key: "soak" }, drag: { x: true, y: false } },
      hooks: { drawClear: [shade], draw: [mark], setScale: [follow] }
    };
    plots.push(new uPlot(opts, data, box));
  });
  if (plots.length === 0) return;
  document.documentElement.classList.add("zoomable");
  function fit() {
    plots.forEach(function (p) {
      var box = p.root.parentNode;
      p.setSize({ width: box.clientWidth, height: 210 });
    });
  }
  fit();
  window.addEventListener("resize", fit);
})();
