// tests/sdk/helpers.mjs — what the SDK tests share: where the server is
// (tools/test-sdk.sh exports CLEF_SDK_BASE_URL / CLEF_SDK_API_KEY), the
// oracle cases, and the System One invariants every answer must keep.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

export const BASE_URL = process.env.CLEF_SDK_BASE_URL;
export const API_KEY = process.env.CLEF_SDK_API_KEY;
if (!BASE_URL || !API_KEY) {
  throw new Error('CLEF_SDK_BASE_URL and CLEF_SDK_API_KEY must be set (run tools/test-sdk.sh)');
}
// The names `clef serve --alias clef-tiny,jev-latest --strict-model` answers to.
export const MODEL = 'clef-tiny';

const ORACLE = '../shared/oracle/clef-tiny';
const lines = (file) => readFileSync(`${ORACLE}/${file}`, 'utf8').split('\n').filter(Boolean);

/** The oracle case `id`: its request and the expected (float64) response. */
export function oracleCase(id) {
  const cases = lines('cases.jsonl').map((l) => JSON.parse(l));
  const index = cases.findIndex((c) => c.id === id);
  assert.ok(index >= 0, `no oracle case ${id}`);
  const expected = JSON.parse(lines('expected.jsonl')[index]);
  assert.equal(expected.id, id);
  return { request: cases[index].request, response: expected.response };
}

export const SPEC_QUESTIONS = {
  is_urgent: {
    type: 'noul',
    instructions: 'Does this convey urgency?',
    criteria: { true: 'Explicitly time-sensitive', false: 'No urgency expressed' },
  },
  department: {
    type: 'choice',
    instructions: { question: 'Which team should handle this?' },
    criteria: { billing: { what: 'Payments, invoicing, refunds' }, technical: 'Bugs, outages', sales: null },
  },
  frustration: {
    type: 'score',
    instructions: 'How frustrated is the customer?',
    criteria: ['Calm', 'Frustrated', 'Very angry'],
  },
};
export const SPEC_STATE = 'Help! My payouts have been failing for 3 days.';

/** A probability distribution over exactly `keys` (in that order), summing to 1. */
export function assertDistribution(probabilities, keys) {
  assert.deepEqual(Object.keys(probabilities), keys);
  let sum = 0;
  for (const p of Object.values(probabilities)) {
    assert.ok(Number.isFinite(p) && p >= 0 && p <= 1, `probability ${p}`);
    sum += p;
  }
  assert.ok(Math.abs(sum - 1) <= 1e-6, `probabilities sum to ${sum}`);
}

/** The invariants of systemone.md on one wire-format response. */
export function assertSystemOneResponse(response, questions, model) {
  assert.equal(response.model, model);
  assert.deepEqual(Object.keys(response.answers), Object.keys(questions));
  for (const [id, q] of Object.entries(questions)) {
    const a = response.answers[id];
    assert.equal(a.type, q.type, id);
    if (q.type === 'noul') {
      assert.deepEqual(Object.keys(a).sort(), ['noul', 'type']);
      assert.ok(a.noul >= 0 && a.noul <= 1);
    } else if (q.type === 'choice') {
      const keys = Object.keys(q.criteria);
      assertDistribution(a.probabilities, keys);
      const max = Math.max(...Object.values(a.probabilities));
      assert.equal(a.choice, keys.find((k) => a.probabilities[k] === max));
      assert.ok(a.confidence >= 0 && a.confidence <= 1);
    } else {
      const keys = q.criteria.map((_, i) => String(i));
      assertDistribution(a.probabilities, keys);
      const mean = keys.reduce((s, k) => s + Number(k) * a.probabilities[k], 0);
      assert.ok(Math.abs(mean - a.score) <= 1e-9, `score ${a.score} vs mean ${mean}`);
      assert.deepEqual(a.legend, Object.fromEntries(q.criteria.map((c, i) => [String(i), c])));
      assert.ok(a.confidence >= 0 && a.confidence <= 1);
    }
  }
  assert.ok(Number.isInteger(response.usage.input_tokens) && response.usage.input_tokens > 0);
  assert.equal(response.usage.output_tokens, 0);
}

export const REQUEST_ID = /^req_[0-9a-f]{32}$/;
