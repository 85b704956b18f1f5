package redisstore

func helperMain() int { return 0 }
