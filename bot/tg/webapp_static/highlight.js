// Syntax colouring for the Mini App's diffs: a small tokenizer per file type, one line at a
// time. It makes text nodes and spans whose text is set as text, never HTML: every line is
// the agent's.
"use strict";

const words = (text) => new Set(text.split(" "));

const LANGUAGES = {
  python: {
    line: "#", quotes: ['"""', "'''", '"', "'"], prefixes: /^[rbuf]{1,2}$/i,
    keywords: words("and as assert async await break class continue def del elif else except "
      + "finally for from global if import in is lambda nonlocal not or pass raise return try "
      + "while with yield match case"),
    constants: words("True False None self"),
  },
  js: {
    line: "//", block: ["/*", "*/"], quotes: ['"', "'", "`"],
    keywords: words("async await break case catch class const continue debugger default delete "
      + "do else export extends finally for from function if import in instanceof interface let "
      + "new of return static switch throw try type typeof var void while yield enum implements "
      + "private protected public readonly as"),
    constants: words("true false null undefined this NaN Infinity"),
  },
  json: { quotes: ['"'], keys: "json", keywords: words(""), constants: words("true false null") },
  yaml: {
    line: "#", quotes: ['"', "'"], keys: "yaml", keywords: words(""),
    constants: words("true false null yes no on off True False Null ~"),
  },
  shell: {
    line: "#", quotes: ['"', "'"], variables: true,
    keywords: words("if then else elif fi for in do done while until case esac function return "
      + "export local readonly set unset exit break continue"),
    constants: words("true false"),
  },
  go: {
    line: "//", block: ["/*", "*/"], quotes: ['"', "`", "'"],
    keywords: words("break case chan const continue default defer else fallthrough for func go "
      + "goto if import interface map package range return select struct switch type var"),
    constants: words("true false nil iota"),
  },
  rust: {
    line: "//", block: ["/*", "*/"], quotes: ['"'],
    keywords: words("as async await break const continue crate dyn else enum extern fn for if "
      + "impl in let loop match mod move mut pub ref return static struct super trait type "
      + "unsafe use where while"),
    constants: words("true false self Self None Some Ok Err"),
  },
};

const EXTENSIONS = {
  py: "python", pyi: "python", js: "js", mjs: "js", cjs: "js", jsx: "js", ts: "js",
  tsx: "js", mts: "js", cts: "js", json: "json", yaml: "yaml", yml: "yaml", sh: "shell",
  bash: "shell", zsh: "shell", go: "go", rs: "rust",
};

const MAX_COLOURED_CHARS = 2000;  // a longer line (minified code, data) is shown plain
const NUMBER = /^(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)/;
const WORD = /^[A-Za-z_$][\w$]*/;
const VARIABLE = /^\$(?:\{[^}]*\}|[A-Za-z_]\w*|[0-9@#?*$!-])/;
const YAML_KEY = /^(\s*(?:-\s+)?)([^\s#'"{[][^:#]*?)(\s*:)(?=\s|$)/;

// The language of a file by its name's extension; "" for plain text.
function languageOf(fileName) {
  const name = (fileName || "").split("/").pop().toLowerCase();
  const dot = name.lastIndexOf(".");
  return dot < 0 ? "" : (EXTENSIONS[name.slice(dot + 1)] || "");
}

// Where a string opened by `quote` at `start` ends (its end, or the line's end).
function stringEnd(line, start, quote) {
  let at = start + quote.length;
  while (at < line.length) {
    if (line[at] === "\\" && quote !== "`") { at += 2; continue; }
    if (line.startsWith(quote, at)) return at + quote.length;
    at += 1;
  }
  return line.length;
}

// One line as [kind, text] pairs: kind is "" (plain), "kw", "const", "str", "num",
// "com", "key" or "var". The texts put together are the line, unchanged.
function tokens(line, language) {
  const lang = LANGUAGES[language];
  if (!lang || line.length > MAX_COLOURED_CHARS) return [["", line]];
  const out = [];
  const push = (kind, text) => {
    if (!text) return;
    const last = out[out.length - 1];
    if (last && last[0] === kind) last[1] += text; else out.push([kind, text]);
  };
  let at = 0;
  if (lang.keys === "yaml") {
    const key = YAML_KEY.exec(line);
    if (key) {
      push("", key[1]); push("key", key[2]); push("", key[3]);
      at = key[0].length;
    }
  }
  while (at < line.length) {
    const rest = line.slice(at);
    if (lang.block && rest.startsWith(lang.block[0])) {
      const close = line.indexOf(lang.block[1], at + lang.block[0].length);
      const end = close < 0 ? line.length : close + lang.block[1].length;
      push("com", line.slice(at, end)); at = end; continue;
    }
    if (lang.line && rest.startsWith(lang.line)
        && (language !== "shell" || at === 0 || /\s/.test(line[at - 1]))) {
      push("com", rest); break;
    }
    const quote = lang.quotes.find((q) => rest.startsWith(q));
    if (quote) {
      const end = stringEnd(line, at, quote);
      const isKey = lang.keys === "json" && /^\s*:/.test(line.slice(end));
      push(isKey ? "key" : "str", line.slice(at, end)); at = end; continue;
    }
    if (lang.variables) {
      const variable = VARIABLE.exec(rest);
      if (variable) { push("var", variable[0]); at += variable[0].length; continue; }
    }
    const before = at > 0 ? line[at - 1] : "";
    if (!/[\w$]/.test(before)) {
      const number = NUMBER.exec(rest);
      if (number) { push("num", number[0]); at += number[0].length; continue; }
      const word = WORD.exec(rest);
      const prefixed = word && lang.prefixes && lang.prefixes.test(word[0])
        && lang.quotes.find((q) => line.startsWith(q, at + word[0].length));
      if (prefixed) {
        const end = stringEnd(line, at + word[0].length, prefixed);
        push("str", line.slice(at, end)); at = end; continue;
      }
      if (word) {
        const kind = lang.keywords.has(word[0]) ? "kw" : lang.constants.has(word[0]) ? "const" : "";
        push(kind, word[0]); at += word[0].length; continue;
      }
    }
    push("", line[at]); at += 1;
  }
  return out;
}

// The line as nodes: a text node per plain run and a span per token, all set as text.
function highlighted(line, language) {
  return tokens(line, language).map(([kind, text]) => {
    if (!kind) return document.createTextNode(text);
    const span = document.createElement("span");
    span.className = `tok-${kind}`;
    span.textContent = text;
    return span;
  });
}
