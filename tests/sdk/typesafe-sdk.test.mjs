// tests/sdk/typesafe-sdk.test.mjs — the official @typesafe-ai/sdk client,
// unchanged, against `clef serve` on the tiny oracle model.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AuthenticationError, BadRequestError, TypeSafeClient,
  UnprocessableEntityError, choice, noul, score,
} from '@typesafe-ai/sdk';
import {
  API_KEY, BASE_URL, MODEL, REQUEST_ID, SPEC_QUESTIONS, SPEC_STATE,
  assertSystemOneResponse, oracleCase,
} from './helpers.mjs';

const client = new TypeSafeClient({ apiKey: API_KEY, baseURL: BASE_URL, retry: { maxRetries: 0 } });

test('models.list() returns the served names', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.map((m) => m.name), [MODEL, 'jev-latest']);
  for (const m of models) {
    assert.equal(typeof m.description, 'string');
    assert.match(m.release_date, /^\d{4}-\d{2}-\d{2}$/);
  }
});

test('systemOne() answers the contract example, typed', async () => {
  const { data, requestId, response } = await client
    .systemOne({ model: MODEL, state: SPEC_STATE, questions: SPEC_QUESTIONS })
    .withResponse();
  assert.match(requestId, REQUEST_ID);
  assert.match(response.headers.get('server-timing'), /backbone;dur=/);
  assertSystemOneResponse(data, SPEC_QUESTIONS, MODEL);
});

test('question helpers and the default model (jev-latest)', async () => {
  const questions = {
    refund: noul('Does the customer want money back?'),
    team: choice('Which team?', { billing: 'Charges', support: null }),
    mood: score('How upset?', ['calm', { label: 'upset' }]),
  };
  const data = await client.systemOne({ state: { ticket: 'I was charged twice.' }, questions });
  // The SDK drops undefined criteria; the wire questions are what it sent.
  const wire = JSON.parse(JSON.stringify(questions));
  assertSystemOneResponse(data, wire, MODEL);
});

test('answers match the float64 oracle (noul_basic)', async () => {
  const { request, response } = oracleCase('noul_basic');
  const data = await client.systemOne({ ...request, model: MODEL });
  assert.equal(data.usage.input_tokens, response.usage.input_tokens);
  assert.ok(Math.abs(data.answers.is_urgent.noul - response.answers.is_urgent.noul) <= 1e-4);
});

test('answers match the float64 oracle (mixed_three_spec_example)', async () => {
  const { request, response } = oracleCase('mixed_three_spec_example');
  const data = await client.systemOne({ ...request, model: 'jev-latest' });
  for (const [id, want] of Object.entries(response.answers)) {
    const got = data.answers[id];
    if (want.type === 'noul') {
      assert.ok(Math.abs(got.noul - want.noul) <= 1e-4, id);
      continue;
    }
    for (const [k, p] of Object.entries(want.probabilities)) {
      assert.ok(Math.abs(got.probabilities[k] - p) <= 1e-4, `${id}.${k}`);
    }
    assert.ok(Math.abs(got.confidence - want.confidence) <= 1e-4, `${id} confidence`);
  }
});

test('unknown model under --strict-model is a BadRequestError', async () => {
  await assert.rejects(
    client.systemOne({ model: 'nope', state: 's', questions: { q: noul('Is it?') } }),
    (e) => e instanceof BadRequestError && e.status === 400 && e.message === '400 Unknown model: nope'
      && REQUEST_ID.test(e.requestId),
  );
});

test('limits and shapes come back as the SDK error classes', async () => {
  const many = Object.fromEntries(Array.from({ length: 256 }, (_, i) => [`o${i}`, null]));
  await assert.rejects(
    client.systemOne({ model: MODEL, state: 's', questions: { q: choice('Which?', many) } }),
    (e) => e instanceof BadRequestError && e.message === '400 Too many choices. Must have at most 255 choices.',
  );
  await assert.rejects(
    client.systemOne({ model: MODEL, state: null, questions: { q: noul('Is it?') } }),
    (e) => e instanceof UnprocessableEntityError && e.status === 422 && Array.isArray(e.body.detail),
  );
});

test('a wrong key is an AuthenticationError', async () => {
  const wrong = new TypeSafeClient({ apiKey: 'not-the-key', baseURL: BASE_URL, retry: { maxRetries: 0 } });
  await assert.rejects(
    wrong.systemOne({ model: MODEL, state: 's', questions: { q: noul('Is it?') } }),
    (e) => e instanceof AuthenticationError && e.status === 401
      && e.body.detail.error_type === 'authentication_error' && REQUEST_ID.test(e.requestId),
  );
  await assert.rejects(wrong.models.list(), (e) => e instanceof AuthenticationError);
});
