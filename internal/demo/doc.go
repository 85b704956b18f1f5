// Package demo is the small upstream that "floodgate serve --demo" starts on
// loopback: a JSON API for the seeds' school office (notices, partner
// students, a login that answers 401 to a wrong password, slow reports) and
// an OpenAI-style chat completion API that reports its token usage, so
// that a newcomer can try the gateway with nothing else installed.
package demo
