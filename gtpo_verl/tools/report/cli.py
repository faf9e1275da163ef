"""``gtpo-report RUN [RUN ...] -o report.html``: the command line of ``write_report``.

Bad input ends in one line on stderr: exit status 2 for the command line itself (usage), 1 for
input it cannot use (a missing file, a file with no metric rows, an unwritable output).
"""

from __future__ import annotations

import argparse
import sys
import time


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="gtpo-report",
        description="One offline HTML page from verl's file-logger metrics (trainer.logger=[...,file]): "
                    "the gtpo-dashboard panels, runs overlaid, seeds as mean and band, configs and warnings.",
        epilog="RUN: a metrics file (*.jsonl), a run folder (its *.jsonl are the run's attempts; a step "
               "logged more than once keeps its last write; .hydra/config.yaml, validation/ and *.log beside them are read too), a folder of run folders, "
               "or NAME=PATH. Runs named <method>_seed<k> are drawn as one method over seeds. docs/report.md.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="metrics file, run folder, folder of run folders, or NAME=PATH")
    p.add_argument("-o", "--out", required=True, help="the HTML file to write")
    p.add_argument("--title", default="gtpo_verl run report", help="page title")
    p.add_argument("--validation", action="append", default=[], metavar="NAME=DIR",
                   help="run NAME's trainer.validation_data_dir (verl's <step>.jsonl sample dumps); repeatable")
    p.add_argument("--panels-only", action="store_true", help="draw only the shared panel list, not every other metric")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    validation = {}
    for item in args.validation:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            parser().error(f"--validation {item!r}: expected NAME=DIR")
        validation[name] = folder
    from gtpo_verl.tools.report import ReportInputError, write_report

    start = time.perf_counter()
    try:
        out = write_report(args.runs, args.out, title=args.title, validation=validation,
                           other_metrics=not args.panels_only)
    except ReportInputError as error:
        print(f"gtpo-report: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"gtpo-report: {error.filename or args.out}: {error.strerror}", file=sys.stderr)
        return 1
    size = out.stat().st_size
    print(f"wrote {out} ({size / 1e6:.2f} MB, {time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
