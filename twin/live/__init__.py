"""The live service: shared and private twins, their runner threads, viewers' actions and budgets."""
