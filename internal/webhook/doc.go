// Package webhook sends one attempt of a `webhook` or `http` job and judges
// its outcome (docs/design.md §4.1, §4.2). It does no Redis I/O.
//
// The pieces, in the order a worker uses them:
//
//   - [NewClient] builds the SSRF-safe *http.Client: every connection is
//     checked on the resolved address at dial time ([CheckAddr]), redirects
//     are never followed, environment proxies are ignored.
//   - [Deliver] builds the request (a Standard Webhooks signed POST for
//     webhook jobs, see [Sign] and [Headers]; the producer's method, headers
//     and body for http jobs), sends it and reads a capped excerpt of the
//     response.
//   - [Classify] (or [Result.Outcome]) turns the status, headers and error
//     into a wire.FinishKind, a pause and a short reason.
//
// [CheckLiteral] serves the API at enqueue time: a URL whose host is a
// literal refused address is rejected with 422 before it is ever queued.
package webhook
