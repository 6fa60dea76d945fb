// A decision's answers read for people: each answer's probabilities by name, its pick, how
// sure it is, and the values a label of it may take.

export function probabilities(answer) {
  if (answer.type === "noul") return { yes: answer.noul, no: 1 - answer.noul };
  if (answer.type === "score") {
    return Object.fromEntries(Object.entries(answer.probabilities)
      .map(([level, p]) => [answer.legend?.[level] ?? level, p]));
  }
  return answer.probabilities;
}

export function pick(answer) {
  if (answer.type === "noul") return answer.noul >= 0.5 ? "yes" : "no";
  if (answer.type === "score") return answer.legend?.[topLevel(answer)] ?? topLevel(answer);
  return answer.choice;
}

function topLevel(answer) {
  return Object.entries(answer.probabilities).sort((a, b) => b[1] - a[1])[0][0];
}

// The largest probability: the lower, the more a label of it would teach.
export function certainty(answer) {
  return Math.max(...Object.values(probabilities(answer)));
}

// [shown name, the value POST /v1/jobs/{id}/labels takes] for each answer a label may give.
export function labelChoices(answer) {
  if (answer.type === "noul") return [["yes", "yes"], ["no", "no"]];
  if (answer.type === "score") {
    return Object.keys(answer.probabilities).map(level =>
      [answer.legend?.[level] ?? level, Number(level)]);
  }
  return Object.keys(answer.probabilities).map(name => [name, name]);
}

// The shown name of a recorded label.
export function labelName(answer, value) {
  if (answer.type === "noul") return value === true || value === "yes" ? "yes" : "no";
  if (answer.type === "score") return answer.legend?.[String(value)] ?? String(value);
  return String(value);
}

export function percent(p) {
  return `${(100 * p).toFixed(1)}%`;
}

// Rows of bars: each name, a bar as wide as its probability, the figure.
export function bars(answer) {
  const grid = document.createElement("div");
  grid.className = "bars";
  for (const [name, p] of Object.entries(probabilities(answer))) {
    const label = document.createElement("span");
    label.textContent = name;
    const track = document.createElement("div");
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.width = percent(p);
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", `${name}: ${percent(p)}`);
    track.append(bar);
    const figure = document.createElement("span");
    figure.textContent = percent(p);
    grid.append(label, track, figure);
  }
  return grid;
}
