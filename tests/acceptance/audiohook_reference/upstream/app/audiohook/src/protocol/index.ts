export * from './core';
export * from './entities-agentassist';
export * from './entities-transcript';
export * from './entities';
export * from './message';
export * from './validators';
