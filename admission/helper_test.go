package admission_test

const helperEnv = "PRQ_ADMISSION_HELPER"

func runHelper() int { return 0 }
