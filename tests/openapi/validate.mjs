// tests/openapi/validate.mjs — checks recorded HTTP exchanges against
// openapi.yaml.
//
//   node tests/openapi/validate.mjs [--spec openapi.yaml] [--expect-failures]
//        FILE_OR_DIR...
//
// Every FILE (or every *.jsonl file of a DIR) holds one JSON object per
// line, written by the end-to-end harness (tests/support/harness.c,
// th_record_exchange): {method, url, status, content_type, body, body_kept,
// sse_event?}. Each is matched to a path template and operation of the
// description and fails when
//   - its path matches no template and the status is not 404 (or 401: auth
//     comes before routing), or its method has no operation and the status
//     is not 405;
//   - its status code is not one of the operation's responses;
//   - it has a body but the response documents no content, or not its
//     media type;
//   - a JSON body (application/json, application/problem+json) does not
//     parse or does not match the response's schema (JSON Schema 2020-12,
//     $refs resolved within openapi.yaml);
//   - an event of a text/event-stream is not one of the media type's
//     x-opsrun-events, or its data does not match that event's schema.
// A path no template matches answers with the Problem schema.
// Exits 0 when every exchange passes, 1 otherwise (listing at most 50
// failures, each with its file and line), 77 when the npm packages are not
// installed (scripts/test.sh installs them and names their directory in
// OPSRUN_OPENAPI_DEPS). No exchange at all passes (a suite may talk only
// through raw sockets).
// --expect-failures is the self-test's mode: every exchange must be
// rejected, with a message holding its own "expect" string; it exits 0 only
// then.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const args = process.argv.slice(2);
let specPath = path.join(path.dirname(new URL(import.meta.url).pathname), '..', '..', 'openapi.yaml');
let expectFailures = false;
const inputs = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === '--spec') specPath = args[++i];
    else if (args[i] === '--expect-failures') expectFailures = true;
    else inputs.push(args[i]);
}

const depsDir = process.env.OPSRUN_OPENAPI_DEPS;
if (!depsDir || !fs.existsSync(path.join(depsDir, 'node_modules', 'ajv'))) {
    console.error('validate.mjs: OPSRUN_OPENAPI_DEPS does not hold ajv, ajv-formats and yaml ' +
        '(scripts/test.sh installs them): skipped');
    process.exit(77);
}
const require = createRequire(path.resolve(depsDir, 'node_modules', 'x.js'));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;
const YAML = require('yaml');

const spec = YAML.parse(fs.readFileSync(specPath, 'utf8'));
const SPEC_ID = 'urn:opsrun:openapi';
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);
ajv.addSchema(spec, SPEC_ID);

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const ptr = (parts) => parts.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/');

// Follows a local $ref of a Response object; returns [object, its pointer].
function deref(obj, pointer) {
    while (obj && obj.$ref) {
        const ref = obj.$ref;
        if (!ref.startsWith('#/')) throw new Error(`unsupported $ref ${ref}`);
        pointer = ref.slice(1);
        obj = ref.slice(2).split('/').reduce((o, k) => o?.[k.replace(/~1/g, '/').replace(/~0/g, '~')], spec);
    }
    return [obj, pointer];
}

const validators = new Map();
function validatorAt(pointer) {
    if (!validators.has(pointer)) validators.set(pointer, ajv.compile({ $ref: `${SPEC_ID}#${pointer}` }));
    return validators.get(pointer);
}

// Templates, literal segments before parameters (so /runs/x/events is
// never taken for a parameter).
const templates = Object.keys(spec.paths || {}).map((t) => {
    const re = new RegExp('^' + t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+') + '$');
    return { template: t, re, params: (t.match(/\{/g) || []).length };
}).sort((a, b) => a.params - b.params);

function mediaKey(content, ct) {
    if (!content) return null;
    const base = (ct || '').split(';')[0].trim().toLowerCase();
    const norm = (s) => s.replace(/\s+/g, '').toLowerCase();
    if (content[ct] !== undefined) return ct;
    for (const k of Object.keys(content)) if (norm(k) === norm(ct || '')) return k;
    for (const k of Object.keys(content)) if (k.split(';')[0].trim().toLowerCase() === base) return k;
    return null;
}

const isJson = (ct) => /^application\/([a-z.+-]*\+)?json\b/i.test(ct || '');

function ajvErrors(v) {
    return (v.errors || []).slice(0, 5).map((e) => `${e.instancePath || '/'} ${e.message}` +
        (e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : '') +
        (e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : '')).join('; ');
}

function checkBody(x, body, schemaPointer, what) {
    let value;
    try {
        value = JSON.parse(body);
    } catch (e) {
        return `${what}: body is not JSON: ${e.message}`;
    }
    const v = validatorAt(schemaPointer);
    if (!v(value)) return `${what}: does not match ${schemaPointer}: ${ajvErrors(v)}`;
    return null;
}

// The problems of one exchange (empty when it conforms).
function checkExchange(x) {
    const u = new URL(x.url, 'http://127.0.0.1');
    const method = String(x.method).toLowerCase();
    const status = String(x.status);
    const hasBody = x.body_kept && typeof x.body === 'string' && x.body.length > 0 && method !== 'head';
    const match = templates.find((t) => t.re.test(u.pathname));
    if (!match) {
        if (status !== '404' && status !== '401')
            return [`no path template matches ${u.pathname} and the status is ${status}, not 404`];
        return hasBody ? [checkBody(x, x.body, '/components/schemas/Problem', 'unmatched path')].filter(Boolean) : [];
    }
    const item = spec.paths[match.template];
    let opMethod = method === 'head' && !item.head ? 'get' : method;
    const op = item[opMethod];
    const where = `${x.method} ${match.template}`;
    if (!op) {
        if (status !== '405' && status !== '401' && !(method === 'options' && status === '204'))
            return [`${where}: no such operation, and the status is ${status}, not 405`];
        return hasBody ? [checkBody(x, x.body, '/components/schemas/Problem', where)].filter(Boolean) : [];
    }
    const basePtr = `/paths/${ptr([match.template, opMethod])}/responses`;
    let key = status in (op.responses || {}) ? status : `${status[0]}XX` in op.responses ? `${status[0]}XX` :
        'default' in op.responses ? 'default' : null;
    if (!key) return [`${where}: status ${status} is not documented (documented: ${Object.keys(op.responses).join(', ')})`];
    const [resp, respPtr] = deref(op.responses[key], `${basePtr}/${ptr([key])}`);
    const ct = x.content_type || '';
    if (!hasBody && !x.sse_event) return [];
    if (!resp.content) return [`${where} ${status}: a body of type "${ct}" where none is documented`];
    const mk = mediaKey(resp.content, ct);
    if (!mk) return [`${where} ${status}: Content-Type "${ct}" is not documented (${Object.keys(resp.content).join(', ')})`];
    const media = resp.content[mk];
    const mediaPtr = `${respPtr}/content/${ptr([mk])}`;
    if (x.sse_event) {
        const events = media['x-opsrun-events'];
        if (!events) return [`${where} ${status}: "${mk}" lists no x-opsrun-events`];
        if (!(x.sse_event in events)) return [`${where}: event "${x.sse_event}" is not documented (${Object.keys(events).join(', ')})`];
        return [checkBody(x, x.body, `${mediaPtr}/x-opsrun-events/${ptr([x.sse_event])}`, `${where} event ${x.sse_event}`)].filter(Boolean);
    }
    if (isJson(ct)) {
        if (!media.schema) return [`${where} ${status}: "${mk}" has no schema`];
        return [checkBody(x, x.body, `${mediaPtr}/schema`, `${where} ${status}`)].filter(Boolean);
    }
    return [];
}

function files(p) {
    if (!fs.existsSync(p)) return [];
    if (fs.statSync(p).isDirectory())
        return fs.readdirSync(p).filter((f) => f.endsWith('.jsonl')).sort().map((f) => path.join(p, f));
    return [p];
}

// Requests the suite's servers answered, from their logs (one "request"
// line each at level info), named in <file>.servers by the harness: what
// the recorded exchanges cover. Servers started with the info lines off
// count as none.
function answered(f) {
    const list = `${f}.servers`;
    if (!fs.existsSync(list)) return null;
    let n = 0;
    for (const log of new Set(fs.readFileSync(list, 'utf8').split('\n').filter(Boolean))) {
        if (!fs.existsSync(log)) continue;
        for (const l of fs.readFileSync(log, 'utf8').split('\n'))
            if (/\brequest method=\S+ path=\S+ status=[1-9]/.test(l) ||
                (/"msg":"request"/.test(l) && /"status":"?[1-9]/.test(l))) n++;
    }
    return n;
}

let total = 0, bad = 0, logged = 0, recordedOfLogged = 0;
const failures = [];
const perOp = new Map();
for (const f of inputs.flatMap(files)) {
    const lines = fs.readFileSync(f, 'utf8').split('\n');
    const n = answered(f);
    if (n) {
        const recorded = lines.filter((l) => l.trim() && !/"sse_event"/.test(l)).length;
        logged += n;
        recordedOfLogged += recorded;
        if (process.env.OPSRUN_OPENAPI_SUMMARY)
            console.log(`  ${path.basename(f)}: ${recorded} requests recorded, ${n} answered`);
    }
    lines.forEach((line, i) => {
        if (!line.trim()) return;
        total++;
        let x, problems;
        try {
            x = JSON.parse(line);
            problems = checkExchange(x);
        } catch (e) {
            problems = [`could not check: ${e.message}`];
        }
        if (x) {
            const k = `${x.method} ${new URL(x.url, 'http://h').pathname.replace(/\/runs\/[^/]+/, '/runs/{id}')} ${x.status}`;
            perOp.set(k, (perOp.get(k) || 0) + 1);
        }
        if (expectFailures) {
            const want = x && x.expect;
            if (!want || !problems.some((p) => p.includes(want))) {
                bad++;
                failures.push(`${path.basename(f)}:${i + 1}: want a failure containing "${want}", got ` +
                    (problems.length ? problems.join(' | ') : 'none'));
            } else if (process.env.OPSRUN_OPENAPI_SUMMARY) {
                console.log(`${path.basename(f)}:${i + 1}: rejected as expected: ${problems.join(' | ')}`);
            }
        } else if (problems.length) {
            bad++;
            for (const p of problems) failures.push(`${path.basename(f)}:${i + 1}: ${p}`);
        }
    });
}

for (const m of failures.slice(0, 50)) console.log(m);
if (failures.length > 50) console.log(`... and ${failures.length - 50} more`);
console.log(`validate.mjs: ${total} exchanges, ${bad} ${expectFailures ? 'not rejected as expected by' : 'not matching'} ${path.basename(specPath)}, ` +
    `${perOp.size} distinct method/path/status`);
if (process.env.OPSRUN_OPENAPI_SUMMARY)
    for (const [k, n] of [...perOp].sort()) console.log(`  ${k}: ${n}`);
if (logged)
    console.log(`validate.mjs: the servers logged ${logged} answered requests; ${recordedOfLogged} ` +
        `(${Math.round((100 * recordedOfLogged) / logged)}%) went through the recording harness`);
if (total === 0) console.log('validate.mjs: no exchanges were recorded');
process.exit(bad ? 1 : 0);
