export * from './audioframe';
export * from './ulaw';
export * from './wav';
