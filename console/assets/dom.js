// Building the page's elements without HTML strings: text is always text, never markup.

export function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (value !== false && value !== null && value !== undefined) {
      element.setAttribute(name, value === true ? "" : value);
    }
  }
  element.append(...children.flat().filter(child => child !== null && child !== undefined));
  return element;
}

export function show(page, ...children) {
  page.replaceChildren(...children.flat().filter(child => child !== null && child !== undefined));
}

export function when(seconds) {
  return seconds ? new Date(seconds).toLocaleString() : "";
}
