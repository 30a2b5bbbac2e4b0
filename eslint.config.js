// ESLint for the front end: static/js holds plain ES modules that run in the browser as they are
// (no build step), beside the vendored Plotly (a classic script that defines the global
// `Plotly`). Run with `npm run lint` after `npm ci`.

import js from "@eslint/js";
import globals from "globals";

// Browser globals that are easy to use by mistake (a missing `const name` reads window.name):
// the list of confusing-browser-globals.
const CONFUSING_GLOBALS = [
  "addEventListener", "blur", "close", "closed", "confirm", "defaultStatus", "defaultstatus", "event",
  "external", "find", "focus", "frameElement", "frames", "history", "innerHeight", "innerWidth",
  "length", "location", "locationbar", "menubar", "moveBy", "moveTo", "name", "onblur", "onerror",
  "onfocus", "onload", "onresize", "onunload", "open", "opener", "opera", "outerHeight",
  "outerWidth", "pageXOffset", "pageYOffset", "parent", "print", "removeEventListener", "resizeBy",
  "resizeTo", "screen", "screenLeft", "screenTop", "screenX", "screenY", "scroll", "scrollbars",
  "scrollBy", "scrollTo", "scrollX", "scrollY", "self", "status", "statusbar", "stop", "toolbar",
  "top",
];

export default [
  { ignores: ["static/vendor/", "node_modules/"] },
  js.configs.recommended,
  {
    files: ["static/js/**/*.js"],
    languageOptions: {
      ecmaVersion: "latest",
      sourceType: "module",
      globals: { ...globals.browser, Plotly: "readonly" },
    },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      // A variable read before its declaration runs throws (the temporal dead zone); functions
      // are hoisted, and closures that run later may name what is declared after them.
      "no-use-before-define": ["error", { functions: false, classes: true, variables: false }],
      "no-restricted-globals": ["error", ...CONFUSING_GLOBALS],
      "array-callback-return": "error",
      "eqeqeq": ["error", "always", { null: "ignore" }],
      "no-promise-executor-return": "error",
      "no-self-compare": "error",
      "no-template-curly-in-string": "error",
      "no-unmodified-loop-condition": "error",
      "no-unreachable-loop": "error",
      "no-duplicate-imports": "error",
      "no-implied-eval": "error",
      "no-new-func": "error",
      "no-var": "error",
      "prefer-const": "error",
    },
  },
];
