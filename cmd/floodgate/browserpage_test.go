package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// textPlainForm returns a page that posts the JSON body to action from a
// text/plain form as soon as it loads, as a page of another site can
// without a CORS preflight. Such a form posts name=value: the name holds
// the JSON up to its last brace, the value the brace (Chromium escapes
// the quotes of a text/plain form; it is still a request an endpoint that
// takes no token must refuse).
func textPlainForm(action, body string) string {
	return fmt.Sprintf(`<!doctype html><form method="POST" enctype="text/plain" action=%q>
<input name=%q value="}"></form><script>document.forms[0].submit();</script>`,
		action, strings.TrimSuffix(body, "}")+`, "x": "`)
}

// formAnswer opens page, whose form posts to an address beginning with
// target, and returns the text of the answer the browser shows.
func formAnswer(t *testing.T, ctx context.Context, page, target string) string {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Poll[string](
		fmt.Sprintf(`location.href.startsWith(%q) && document.body && document.body.innerText`, target),
		chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatalf("the attacker's form: %v", err)
	}
	return shown
}
