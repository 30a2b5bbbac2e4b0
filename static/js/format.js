// Numbers as the views print them.

const fmt = new Intl.NumberFormat("en-US");

/** 17301504 → "17,301,504". */
export function formatCount(n) {
  return n === null || n === undefined ? "–" : fmt.format(n);
}

/** Bytes → "16.5 MB" (decimal units, as bandwidths are quoted). */
export function formatBytes(b) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  let v = b;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${v.toFixed(v < 10 && i > 0 ? 2 : v < 100 && i > 0 ? 1 : 0)} ${units[i]}`;
}
