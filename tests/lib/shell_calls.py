#!/usr/bin/env python3
"""shell_calls.py - the commands a shell script calls, by the words in command position.

    tests/lib/shell_calls.py FILE...

Prints one line per call: the command's name, then FILE:LINE. shfmt (Debian shfmt)
parses each file; a word counts only as the first word of a simple command, after an
assignment or a wrapper that runs its arguments (env, exec, timeout, xargs, setsid,
nohup, nice, unshare, chroot, sudo, mpirun, find -exec, ip netns exec), or as the first word
of the code in `bash -c CODE`, `trap CODE`, `eval CODE`, a shell heredoc (one fed to
sh or bash, or one whose text starts with a #! line naming sh or bash) and an array
assignment's first element (cmd=(mpirun ...), run later as "${cmd[@]}"). Words in
messages, case patterns, comments and Python or awk programs are not calls.
A command held in a variable ("$PY", $CONV) counts by the variable's default
(${PY:-python3}) and the literal values the file assigns it (CONV="perl x.pl");
the functions the file defines are not commands.
Exit status: 0, 1 a file shfmt cannot read or parse (its message).
"""
import json
import os
import subprocess
import sys

# Wrappers whose arguments, after their own options, are a command; for each, the
# options that take a value as the next word.
WRAPPERS = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "exec": {"-a"},
    "command": set(),
    "builtin": set(),
    "nohup": set(),
    "setsid": set(),
    "nice": {"-n", "--adjustment"},
    "stdbuf": {"-i", "-o", "-e"},
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
    "unshare": {"-S", "-G", "--setuid", "--setgid", "-R", "--root", "-w", "--wd", "--propagation"},
    "xargs": {"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"},
    "timeout": {"-k", "--kill-after", "-s", "--signal"},
    "chroot": set(),
    # Open MPI's launcher: its program comes after its options.
    "mpirun": {"-np", "-n", "--np", "-c", "-H", "--host", "-host", "--hostfile", "-hostfile",
               "--machinefile", "-machinefile", "--map-by", "-map-by", "--bind-to", "-bind-to",
               "--rank-by", "-x", "--prefix", "--wdir", "-wdir", "--npernode", "-npernode", "-N",
               "--output-filename", "--timeout", "--mca", "-mca", "--gmca", "-gmca"},
}
WRAPPERS["mpiexec"] = WRAPPERS["mpirun"]
# Options that take two values (--mca NAME VALUE).
TWO_VALUES = {"--mca", "-mca", "--gmca", "-gmca"}
# Wrappers with a positional argument before the command: timeout DURATION, chroot DIR.
LEADING = {"timeout": 1, "chroot": 1}
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "dash"}


class Unreadable(Exception):
    pass


def parse(text, where):
    """shfmt's syntax tree of a shell text."""
    try:
        p = subprocess.run(["shfmt", "-ln", "bash", "--to-json"], input=text.encode(),
                           capture_output=True, check=False)
    except OSError as e:
        raise Unreadable(f"shfmt: {e.strerror}") from None
    if p.returncode != 0:
        raise Unreadable(f"{where}: shfmt: {p.stderr.decode(errors='replace').strip()}")
    return json.loads(p.stdout)


def word_text(word, expansion=None):
    """A word's text, quotes removed; each expansion ($X, $(...)) becomes `expansion`, or
    with None the whole word is None (it is not a literal)."""
    if not isinstance(word, dict):
        return None
    out = []
    for part in word.get("Parts", []):
        t = part.get("Type")
        if t in ("Lit", "SglQuoted"):
            out.append(part.get("Value", ""))
        elif t == "DblQuoted":
            out.append(word_text(part, expansion))
        else:
            out.append(expansion)
        if out[-1] is None:
            return None
    return "".join(out)


def literal(word):
    """A word's text when it is literal (quotes allowed, no expansion), else None."""
    return word_text(word)


def text_of(word):
    """A word's text with every expansion as a placeholder: code to parse again."""
    return word_text(word, "_")


def line_of(node):
    return node.get("Pos", {}).get("Line", 1)


class Scan:
    def __init__(self, path):
        self.path = path
        self.calls = []  # (name, line)
        self.functions = set()
        self.values = {}  # variable -> the words assigned to it
        self.called_vars = []  # (variable, line): "$X" or ${X:-default} in command position

    def code(self, text, line0):
        """Scan shell code that starts on line line0 of the file."""
        self.walk(parse(text, f"{self.path}:{line0}"), line0 - 1)

    def call(self, args, base, i=0):
        """args[i] is in command position: record it, look through wrappers."""
        while i < len(args):
            name = literal(args[i])
            if name is None:
                self.variable_call(args[i], base)
                return
            self.calls.append((name, base + line_of(args[i])))
            rest = [literal(a) for a in args[i + 1:]]
            if name in ("trap", "eval") and args[i + 1:]:
                src = args[i + 1:] if name == "eval" else args[i + 1:i + 2]
                self.code(" ".join(text_of(a) for a in src), base + line_of(args[i + 1]))
                return
            if name == "find":
                for k, a in enumerate(rest):
                    if a in ("-exec", "-execdir", "-ok", "-okdir"):
                        self.call(args, base, i + 2 + k)
                return
            if name == "command" and rest[:1] and rest[0] in ("-v", "-V"):
                return  # a question whether it is there, not a call
            if name == "ip" and rest[:2] == ["netns", "exec"]:
                i += 4
                continue
            if name not in WRAPPERS:
                return
            j, lead = i + 1, LEADING.get(name, 0)
            while j < len(args):
                a = literal(args[j])
                if a is None:
                    break
                if a == "--":
                    j += 1
                    break
                if a.startswith("-") and len(a) > 1:
                    j += 1 + (a in WRAPPERS[name]) + (a in TWO_VALUES)
                elif name == "env" and "=" in a:
                    j += 1
                elif lead:
                    lead -= 1
                    j += 1
                else:
                    break
            i = j

    def shell_code(self, args, base):
        """The CODE of `sh -c CODE` or `bash [-e...] -c CODE` anywhere in a command line
        (mpirun ... bash -c CODE, timeout 9 sh -c CODE)."""
        words = [literal(a) for a in args]
        for k, w in enumerate(words):
            if w not in SHELLS:
                continue
            j = k + 1
            while j < len(words) and words[j] is not None and words[j].startswith("-") and words[j] != "-c":
                j += 1
            if j + 1 < len(words) and words[j] == "-c":
                self.code(text_of(args[j + 1]), base + line_of(args[j + 1]))

    def variable_call(self, word, base):
        """A command held in a variable ($CONV, "${CC:-clang}"): its default now, its
        assigned values once the whole file is read (resolve)."""
        parts = word.get("Parts", [])
        if len(parts) == 1 and parts[0].get("Type") == "DblQuoted":
            parts = parts[0].get("Parts", [])
        if len(parts) != 1 or parts[0].get("Type") != "ParamExp":
            return
        pe = parts[0]
        default = (pe.get("Exp") or {}).get("Word")
        if default:
            self.call_text(text_of(default), base + line_of(word))
        self.called_vars.append(((pe.get("Param") or {}).get("Value"), base + line_of(word)))

    def call_text(self, text, line):
        """The first word of a command line held as text."""
        words = text.split()
        if words and words[0] != "_":
            self.calls.append((words[0], line))

    def resolve(self):
        for var, line in self.called_vars:
            for value in self.values.get(var, []):
                lit = literal(value)
                if lit is not None:
                    self.call_text(lit, line)
                else:
                    parts = value.get("Parts", [])
                    if len(parts) == 1 and parts[0].get("Type") == "ParamExp":
                        default = (parts[0].get("Exp") or {}).get("Word")
                        if default:
                            self.call_text(text_of(default), line)
                    else:
                        self.call_text(text_of(value), line)

    def walk(self, node, base):
        if isinstance(node, list):
            for n in node:
                self.walk(n, base)
            return
        if not isinstance(node, dict):
            return
        t = node.get("Type")
        if t == "FuncDecl":
            self.functions.add(node.get("Name", {}).get("Value"))
        if "Cmd" in node and "Redirs" in node:  # a statement: its heredocs
            self.heredocs(node, base)
        if "Name" in node and node.get("Value") and not node.get("Append"):  # X=... (local X=... too)
            self.values.setdefault(node["Name"].get("Value"), []).append(node["Value"])
        if "Array" in node and "Name" in node:  # an array assignment, as in local or export too
            elems = (node.get("Array") or {}).get("Elems") or []
            if elems and elems[0].get("Value"):
                self.call([elems[0]["Value"]], base)
        if t == "CallExpr" and node.get("Args"):
            self.call(node["Args"], base)
            self.shell_code(node["Args"], base)
        for k, v in node.items():
            if isinstance(v, (dict, list)) and k not in ("Pos", "End"):
                self.walk(v, base)

    def heredocs(self, stmt, base):
        cmd = stmt.get("Cmd") or {}
        args = cmd.get("Args") or [] if cmd.get("Type") == "CallExpr" else []
        fed_to_shell = bool(args) and literal(args[0]) in SHELLS and \
            "-c" not in [literal(a) for a in args[1:]]
        for r in stmt.get("Redirs") or []:
            hdoc = r.get("Hdoc")
            if not hdoc:
                continue
            text = text_of(hdoc)
            first = text.split("\n", 1)[0]
            if fed_to_shell or (first.startswith("#!") and
                                os.path.basename(first[2:].split()[-1] if first[2:].split() else "") in
                                ("sh", "bash", "dash")):
                self.code(text, base + line_of(hdoc))


def main():
    status = 0
    for path in sys.argv[1:]:
        s = Scan(path)
        try:
            with open(path, encoding="utf-8") as f:
                s.code(f.read(), 1)
            s.resolve()
        except (OSError, UnicodeDecodeError, Unreadable) as e:
            print(f"shell_calls.py: {path}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            status = 1
            continue
        for name, line in s.calls:
            if name not in s.functions:
                print(f"{name} {path}:{line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
