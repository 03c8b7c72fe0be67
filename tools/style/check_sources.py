#!/usr/bin/env python3
"""Checks the project's source rules that a machine can check.

  check_sources.py ROOT [--max-lines N] [--max-function-lines M] [--no-format]

- Every C++ source file (.h/.hpp/.cpp/.cu/.def) under the source folders has
  at most N lines (default 800): split such a file by family instead.
- Every function body (free functions, member functions, TEST bodies, macro-
  defined rules) has at most M lines (default 150): split it into named steps.
- Every file is formatted as `clang-format-14` with the committed .clang-format
  formats it (skipped, with a message, when clang-format 14 is not installed:
  other versions format differently).
- Every folder README lists its files: under the library, example and bench
  folders, each source file (also .py/.sh) is named in the README.md of its
  folder or of the nearest folder above it that has one: by its path relative
  to that folder, its basename, or a backticked pattern (`driver.*`,
  `src/ops/binary*.cpp`; `*` stays within one path component).
- Enumerators of `enum class` are kCamelCase (as PyTorch's C++ frontend spells
  kCPU, kMean); the exceptions are enums whose enumerators are the names users
  type as values elsewhere: DType (kiln::f32) and OpId (the op table's names).
Exit status 1 lists every offence with its size or place; 0 when all pass.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SOURCE_DIRS = ["runtime", "ir", "passes", "codegen", "distributed", "examples", "bench", "tests",
               "tools"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cu", ".def")
# Generated text (golden printer output), fuzz corpora and fixtures are not hand-written sources.
SKIP_DIRS = {"corpus", "fixtures", "golden", "__pycache__"}
# Braces that open a scope whose children may be functions.
SCOPE_WORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s*\"C\"")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return)\b")
# Folders whose READMEs must list their files, and the files they must list.
README_DIRS = ["runtime", "ir", "passes", "codegen", "distributed", "examples", "bench"]
README_EXTENSIONS = EXTENSIONS + (".py", ".sh")


def source_files(root):
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def readme_listings(root):
    """(folder, its files relative to it) for each folder with a README.md under README_DIRS;
    the files of a sub-folder with its own README.md belong to that one instead."""
    for top in README_DIRS:
        pending = []  # (README folder, its files) of the READMEs above the current folder
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            while pending and not (dirpath + os.sep).startswith(pending[-1][0] + os.sep):
                yield pending.pop()
            if "README.md" in filenames:
                pending.append((dirpath, []))
            if pending:
                base, files = pending[-1]
                files.extend(os.path.relpath(os.path.join(dirpath, name), base)
                             for name in sorted(filenames) if name.endswith(README_EXTENSIONS))
        while pending:
            yield pending.pop()


def readme_names(text):
    """(the path-like words of a README, its backticked file patterns as regexes); code
    blocks are left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    words = {w.rstrip(".").removeprefix("./") for w in re.findall(r"[\w.-]+(?:/[\w.-]+)*", text)}
    patterns = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for token in re.split(r"[\s,;()]+", span):
            # A file pattern has a wildcard and a '.' or '/'; `2*s0` and `a*b` are not ones.
            if "*" in token and re.fullmatch(r"[\w./*?-]+", token) and re.search(r"[./]", token):
                rx = re.escape(token).replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
                patterns.append(re.compile(rx))
    return words, patterns


def readme_misses(root):
    """(README, file) for each file its README does not name."""
    misses = []
    for base, files in readme_listings(root):
        if not files:
            continue
        with open(os.path.join(base, "README.md"), encoding="utf-8", errors="replace") as f:
            words, patterns = readme_names(f.read())
        longer = {}  # the words with a folder, by basename
        for w in words:
            longer.setdefault(w.rsplit("/", 1)[-1], []).append(w)
        for rel in files:
            parts = rel.split(os.sep)
            # A file is named by a tail of its path (unary.cpp, ops/unary.cpp, kiln/tensor.h)
            # or by its path with folders above the README's (runtime/src/ops/unary.cpp);
            # src/attention.cpp does not name src/nn/attention.cpp.
            suffixes = ["/".join(parts[k:]) for k in range(len(parts))]
            named = any(s in words for s in suffixes) or any(
                w.endswith("/" + suffixes[0]) for w in longer.get(parts[-1], []))
            if not named and not any(p.fullmatch(s) for p in patterns for s in suffixes):
                misses.append((os.path.relpath(os.path.join(base, "README.md"), root), rel))
    return sorted(misses)


def strip_code(text):
    """Blanks comments, string/char literals and preprocessor lines, keeping newlines."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A directive, with its continuation lines.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
            continue
        if c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                end = n if end < 0 else end + len(m.group(1)) + 2
                out.append('""' + "\n" * text.count("\n", i, end))
                i = end
                continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def long_functions(text, limit):
    """(first line, lines, header) of each function body longer than limit lines."""
    code = strip_code(text)
    found = []
    stack = []  # per open brace: True when its children may be functions
    header_start = 0
    line = 1
    open_line = []
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            header = code[header_start:i]
            in_scope = not stack or stack[-1] == "scope"
            kind = "other"
            if in_scope:
                if SCOPE_WORDS.search(header) and "(" not in header.split("{")[-1].split("=")[0]:
                    kind = "scope"
                elif re.search(r"\)[\w\s:&<>,\->*\[\]]*$", header) and not CONTROL.match(header) \
                        and not re.search(r"=\s*$", header):
                    kind = "function"
            stack.append(kind)
            open_line.append((line, header.strip().splitlines()[-1:] or [""]))
            header_start = i + 1
        elif c == "}":
            if stack:
                kind = stack.pop()
                first, head = open_line.pop()
                if kind == "function" and line - first + 1 > limit:
                    found.append((first, line - first + 1, " ".join(head).strip()[:80]))
            header_start = i + 1
        elif c == ";":
            header_start = i + 1
    return found


def format_offenders(root, files):
    exe = shutil.which("clang-format-14")
    if exe is None:
        plain = shutil.which("clang-format")
        if plain and "version 14." in subprocess.run([plain, "--version"], capture_output=True,
                                                       text=True).stdout:
            exe = plain
    if exe is None:
        print("check_sources: clang-format 14 not found (scripts/setup.sh installs it): "
              "formatting not checked")
        return None
    bad = []
    for k in range(0, len(files), 64):
        batch = files[k:k + 64]
        r = subprocess.run([exe, "--dry-run", "-Werror", "--style=file"] + batch, cwd=root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            for path in batch:
                one = subprocess.run([exe, "--dry-run", "-Werror", "--style=file", path], cwd=root,
                                     capture_output=True, text=True)
                if one.returncode != 0:
                    bad.append(path)
    return bad


# Enums whose enumerators are data names (dtype names, op-table names), not kCamelCase.
ENUM_STYLE_EXCEPTIONS = {"DType", "OpId"}
ENUM_DECL = re.compile(r"\benum\s+class\s+(\w+)[^{;]*\{([^}]*)\}")
ENUMERATOR = re.compile(r"^\s*([A-Za-z_]\w*)")


def enum_style_offenders(rel, text):
    """(place, enum, enumerator) for each enumerator of an enum class not spelled kCamelCase."""
    code = strip_code(text)
    for m in ENUM_DECL.finditer(code):
        name, body = m.group(1), m.group(2)
        if name in ENUM_STYLE_EXCEPTIONS or "#" in body:  # X-macro bodies take the table's names
            continue
        for item in body.split(","):
            e = ENUMERATOR.match(item)
            if e and not re.fullmatch(r"k[A-Z0-9]\w*", e.group(1)):
                line = code.count("\n", 0, m.start()) + 1
                yield f"{rel}:{line}", name, e.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--max-lines", type=int, default=800)
    ap.add_argument("--max-function-lines", type=int, default=150)
    ap.add_argument("--no-format", action="store_true")
    args = ap.parse_args()
    too_long, long_fns, rels, enums = [], [], [], []
    for path in source_files(args.root):
        rel = os.path.relpath(path, args.root)
        rels.append(rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > args.max_lines:
            too_long.append((lines, rel))
        if not rel.endswith(".def"):
            for first, n, head in long_functions(text, args.max_function_lines):
                long_fns.append((n, f"{rel}:{first}", head))
            enums.extend(enum_style_offenders(rel, text))
    for lines, rel in sorted(too_long, reverse=True):
        print(f"{rel}: {lines} lines (limit {args.max_lines}): split it by family")
    for n, where, head in sorted(long_fns, reverse=True):
        print(f"{where}: a function of {n} lines (limit {args.max_function_lines}): split it into "
              f"named steps [{head}]")
    for where, name, item in enums:
        print(f"{where}: enumerator {name}::{item} is not kCamelCase (write k{item[:1].upper()}"
              f"{item[1:]})")
    cxx = [r for r in rels if not r.endswith(".def")]  # X-macro tables keep their own layout
    unformatted = [] if args.no_format else format_offenders(args.root, cxx)
    for rel in unformatted or []:
        print(f"{rel}: not formatted: run clang-format-14 -i {rel}")
    unlisted = readme_misses(args.root)
    for readme, rel in unlisted:
        print(f"{readme} does not list {rel}: add a line saying what it holds")
    print(f"check_sources: {len(rels)} files, {len(too_long)} over {args.max_lines} lines, "
          f"{len(long_fns)} functions over {args.max_function_lines} lines, "
          f"{'unchecked' if unformatted is None else len(unformatted)} not formatted, "
          f"{len(unlisted)} not listed in their folder's README, "
          f"{len(enums)} enumerators not kCamelCase")
    return 1 if too_long or long_fns or unformatted or unlisted or enums else 0


if __name__ == "__main__":
    sys.exit(main())
