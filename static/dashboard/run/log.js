/* The event log: the filter form (task, event type) applied to the rows, and a cap on rows kept. */

var MAX_LOG_ROWS = 500;

// No filter hides the progress ticks; "all" shows everything; "task" a family, "task.failed" one type.
function matchesType(type, filter) {
  if (filter === "all") {
    return true;
  }
  if (!filter) {
    return type !== "task.progress";
  }
  if (filter.indexOf(".") >= 0) {
    return type === filter;
  }
  return type.indexOf(filter + ".") === 0;
}

// Types that arrived live join the filter's "Types" list, in order, as a reload would list them:
// the types of the rows, and those a frame names on #live-seq (data-types) when it sent a page of
// the log rather than a row per event.
function listNewTypes(form, rows) {
  var types = form && form.querySelector("#filter-type optgroup[label='Types']");
  if (!types) {
    return;
  }
  var known = {};
  Array.prototype.forEach.call(types.children, function (option) {
    known[option.value] = true;
  });
  var arrived = Array.prototype.map.call(rows, function (row) {
    return row.dataset.type;
  });
  var marker = document.getElementById("live-seq");
  if (marker && marker.dataset.types) {
    arrived = arrived.concat(marker.dataset.types.split(","));
  }
  arrived.forEach(function (type) {
    if (!type || known[type]) {
      return;
    }
    known[type] = true;
    var next = Array.prototype.find.call(types.children, function (option) {
      return option.value > type;
    });
    types.insertBefore(new Option(type, type), next || null);
  });
}

export function filterLog() {
  var rows = document.getElementById("event-log-rows");
  if (!rows) {
    return;
  }
  var form = document.getElementById("event-filter");
  listNewTypes(form, rows.querySelectorAll(".event-row"));
  var task = form ? form.elements.task.value : "";
  var type = form ? form.elements.type.value : "";
  var all = rows.querySelectorAll(".event-row");
  all.forEach(function (row) {
    var show = (!task || row.dataset.task === task) && matchesType(row.dataset.type, type);
    row.classList.toggle("is-filtered", !show);
  });
  for (var i = all.length - 1; i >= MAX_LOG_ROWS; i--) {
    all[i].remove();
  }
}
