// Builds the console into dist/: one bundled, minified script (rhea included), one stylesheet
// and index.html. Everything the page loads comes from the router's http listener: no CDN.
//   node build.mjs           build once
//   node build.mjs --watch   rebuild on change (development)
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist');
const watch = process.argv.includes('--watch');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
copyFileSync(join(here, 'src', 'index.html'), join(out, 'index.html'));
copyFileSync(join(here, 'src', 'favicon.svg'), join(out, 'favicon.svg'));

const options = {
  entryPoints: { app: join(here, 'src', 'main.js'), style: join(here, 'src', 'style.css') },
  bundle: true,
  minify: !watch,
  sourcemap: watch ? 'inline' : false,
  format: 'iife',
  target: ['es2020'],
  platform: 'browser',
  outdir: out,
  legalComments: 'linked',
  logLevel: watch ? 'info' : 'warning',
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
