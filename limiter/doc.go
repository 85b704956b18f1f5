// Package limiter is Floodgate's engine: it checks and charges the set of
// limits that apply to one request, all or nothing, against a Store, and
// applies each limit's failure policy when the store cannot answer in time.
package limiter
