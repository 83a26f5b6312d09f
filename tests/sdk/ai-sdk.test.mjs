// tests/sdk/ai-sdk.test.mjs — the AI SDK (`ai` + `@ai-sdk/typesafe-ai`),
// unchanged, against `clef serve`: experimental_evaluate with boolean
// (= noul), choice and score questions.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createTypeSafeAi } from '@ai-sdk/typesafe-ai';
import { experimental_evaluate } from 'ai';
import { API_KEY, BASE_URL, MODEL, REQUEST_ID, assertDistribution } from './helpers.mjs';

const provider = createTypeSafeAi({ apiKey: API_KEY, baseURL: `${BASE_URL}/v1` });

const questions = {
  requestsRefund: { type: 'boolean', instructions: 'Is the customer requesting money back?' },
  department: {
    type: 'choice',
    instructions: 'Which team should handle this?',
    criteria: { billing: { includes: ['Charges', 'Refunds'] }, technical: ['Bugs', 'Outages'], other: null },
  },
  severity: { type: 'score', instructions: 'How severe?', criteria: ['low', 'medium', 'high'] },
};

for (const [what, state] of [
  ['text state', 'I was charged twice. Please refund the duplicate.'],
  ['JSON state', { message: 'I was charged twice.', customer: { tier: 'gold' } }],
]) {
  test(`experimental_evaluate, ${what}`, async () => {
    const result = await experimental_evaluate({
      model: provider.evaluationModel(MODEL), state, questions, maxRetries: 0,
    });
    const { answers } = result;
    assert.deepEqual(Object.keys(answers), Object.keys(questions));
    assert.equal(answers.requestsRefund.type, 'boolean');
    assert.ok(answers.requestsRefund.probability >= 0 && answers.requestsRefund.probability <= 1);
    assert.equal(answers.department.type, 'choice');
    assert.ok(['billing', 'technical', 'other'].includes(answers.department.choice));
    assertDistribution(answers.department.probabilities, ['billing', 'technical', 'other']);
    assert.equal(answers.severity.type, 'score');
    assertDistribution(answers.severity.probabilities, ['0', '1', '2']);
    assert.ok(answers.severity.score >= 0 && answers.severity.score <= 2);
    assert.ok(result.usage.inputTokens > 0);
    assert.equal(result.usage.outputTokens, 0);
    assert.equal(result.response.modelId, MODEL);
    const confidence = result.providerMetadata.typesafe.confidence;
    assert.deepEqual(Object.keys(confidence).sort(), ['department', 'severity']);
    assert.match(result.response.headers['x-typesafe-request-id'], REQUEST_ID);
  });
}

test('errors surface with their status and the server message', async () => {
  const evaluate = (model, p = provider) => experimental_evaluate({
    model: p.evaluationModel(model), state: 's',
    questions: { q: { type: 'boolean', instructions: 'Is it?' } }, maxRetries: 0,
  });
  await assert.rejects(evaluate('nope'), (e) => e.statusCode === 400 && /Unknown model: nope/.test(e.message));
  const wrong = createTypeSafeAi({ apiKey: 'not-the-key', baseURL: `${BASE_URL}/v1` });
  await assert.rejects(evaluate(MODEL, wrong), (e) => e.statusCode === 401
    && /Cannot authenticate with the server/.test(e.message));
});
