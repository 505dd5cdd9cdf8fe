// A third-party CIBA client against grantd (issue 25): npm openid-client 6 with private_key_jwt
// (the agent's Ed25519 key, PKCS#8 PEM), initiateBackchannelAuthentication, then
// pollBackchannelAuthenticationGrant until a person decides. Prints one JSON line per step:
// {"step": "ack", ...} after /bc-authorize, {"step": "tokens", ...} or {"step": "error", ...}.
// Usage: node ciba_poll.mjs ISSUER CLIENT_ID KEY_PEM_FILE AUTHORIZATION_DETAILS_JSON
import { readFileSync } from 'node:fs'
import { webcrypto } from 'node:crypto'
import * as client from 'openid-client'

const [issuer, clientId, keyFile, details] = process.argv.slice(2)

const pem = readFileSync(keyFile, 'utf8').replace(/-----[^-]+-----/g, '').replace(/\s+/g, '')
const key = await webcrypto.subtle.importKey('pkcs8', Buffer.from(pem, 'base64'), { name: 'Ed25519' }, false, ['sign'])

try {
  const config = await client.discovery(
    new URL(issuer),
    clientId,
    { id_token_signed_response_alg: 'EdDSA' },
    client.PrivateKeyJwt(key),
    { execute: [client.allowInsecureRequests] },
  )
  const ack = await client.initiateBackchannelAuthentication(config, {
    scope: 'openid',
    login_hint: 'policy',
    binding_message: 'node ciba',
    authorization_details: details,
  })
  console.log(JSON.stringify({ step: 'ack', auth_req_id: ack.auth_req_id, expires_in: ack.expires_in, interval: ack.interval }))
  const tokens = await client.pollBackchannelAuthenticationGrant(config, ack)
  console.log(JSON.stringify({
    step: 'tokens',
    access_token: tokens.access_token,
    token_type: tokens.token_type,
    id_token_claims: tokens.claims(),
    authorization_details: tokens.authorization_details,
  }))
} catch (error) {
  console.log(JSON.stringify({ step: 'error', name: error.name, code: error.code, error: error.error, message: error.message }))
  process.exitCode = 2
}
